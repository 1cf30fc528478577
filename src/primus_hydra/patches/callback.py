"""The Hydra callback that registers patches at job start (configured under hydra.callbacks.patches).

Hydra turns exceptions raised in callbacks into warnings, so failures are recorded in the registry: preparing the
job stops with them as one line each, before any process starts."""
from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from primus_hydra.patches.loader import load_patch_modules


class PatchRegistrationCallback(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        load_patch_modules(config)
