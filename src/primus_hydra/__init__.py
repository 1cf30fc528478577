"""primus-hydra: Primus's LLM-training launcher re-designed on Hydra.

The Python API (primus_hydra/api.py), imported on first use so that the workers, which import this package,
never load Hydra for it:

    cfg = primus_hydra.compose(["model=llama_tiny", "module.train_iters=20"])
    loss = primus_hydra.run(cfg, "outputs/tiny")

Both raise PrimusError (ConfigValidationError, with `.failures`, for a config the rules refuse).
"""
from primus_hydra.config.paths import CheckoutConfFinder
from primus_hydra.errors import ConfigValidationError, PrimusError

__version__ = "0.1.0"
__all__ = ["compose", "run", "PrimusError", "ConfigValidationError", "__version__"]

CheckoutConfFinder.install()  # `primus_hydra.conf` from a source checkout, too


def __getattr__(name: str):
    if name in ("compose", "run"):
        from primus_hydra.config.hydra_import import fast_hydra_import

        with fast_hydra_import():  # the API imports Hydra
            from primus_hydra import api

        globals()[name] = getattr(api, name)
        return globals()[name]
    raise AttributeError(f"module 'primus_hydra' has no attribute {name!r}")
