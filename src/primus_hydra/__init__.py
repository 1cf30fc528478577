"""primus-hydra: Primus's LLM-training launcher re-designed on Hydra."""

__version__ = "0.1.0"
