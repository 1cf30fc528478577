"""The Hydra callback that prepares a single run before Hydra creates its run directory (hydra.callbacks.prepare).

The selected task prepares its job (orchestrator/prepare.py); a rejected run stops here with one `error:` line per
failure and exit code 2, and leaves nothing behind. Hydra turns exceptions raised in callbacks into warnings, so
this callback exits itself (SystemExit passes through). The prepared job is handed to the task (JobHandoff).
"""
from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class PrepareJobCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from primus_hydra.config.error_format import format_compose_error, is_compose_error
        from primus_hydra.config.paths import hydra_job_dir
        from primus_hydra.config.targets import load_target
        from primus_hydra.errors import ConfigValidationError, PrimusError
        from primus_hydra.orchestrator.prepare import HANDOFF

        try:
            task_class = load_target(config.task._target_, "task._target_")
            prepare_job = getattr(task_class, "prepare_job", None)
            if prepare_job is None:  # a task that runs no job (task=status)
                return
            run_dir = hydra_job_dir(config, sweep=False)
            job = prepare_job(config, run_dir)
        except ConfigValidationError as error:
            _exit([f"error: {line}" for line in error.failures], error.exit_code)
        except PrimusError as error:
            _exit([f"error: {line}" for line in str(error).splitlines()], error.exit_code)
        except Exception as error:  # noqa: BLE001 - an interpolation that does not resolve, a bad value
            if not is_compose_error(error):
                raise
            _exit([f"error: {format_compose_error(error)}"], 2)
        for warning in job.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        HANDOFF.give(run_dir, job)


def _exit(lines: list[str], code: int) -> None:
    for line in lines:
        print(line, file=sys.stderr)
    raise SystemExit(code)
