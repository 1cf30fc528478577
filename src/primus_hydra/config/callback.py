"""The Hydra callback that validates a single run's config before Hydra creates its run directory.

Hydra turns exceptions raised in callbacks into warnings, so a failure is reported here (one line per rule)
and ends the process with SystemExit, which Hydra lets through. The runtime validates again (cheap) for jobs
that do not come through the command line.
"""
from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class ValidateBeforeRunCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from primus_hydra.config.validate import validate_config
        from primus_hydra.errors import ConfigValidationError
        from primus_hydra.runtime.distributed_env import detect_distributed_env

        dist = detect_distributed_env()
        try:
            validate_config(config, world_size=dist.world_size if dist.is_distributed else None)
        except ConfigValidationError as error:
            for line in error.failures:
                print(f"error: {line}", file=sys.stderr)
            raise SystemExit(error.exit_code) from None
