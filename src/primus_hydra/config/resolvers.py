"""OmegaConf resolvers the shipped configs use, registered when the schema module is imported (every process that
composes or loads a config imports it). Cheap, idempotent, no side effects beyond OmegaConf's resolver table."""
from __future__ import annotations

from omegaconf import OmegaConf


def _times(value, factor) -> float:
    return float(value) * float(factor)


def register_resolvers() -> None:
    # ${primus.times:${.lr},0.1}: the module presets' min_lr is 10 % of lr, so `module.lr=...` sweeps keep lr >= min_lr
    OmegaConf.register_new_resolver("primus.times", _times, replace=True)


register_resolvers()
