"""Tasks (train now; plan, status, projection, preflight, benchmark later), each instantiated by `task._target_`."""
from __future__ import annotations

from omegaconf import DictConfig


def run_task(cfg: DictConfig):
    """Build the task named by `cfg.task._target_` and run it; returns what the task returns (e.g. final loss)."""
    from primus_hydra.config.targets import load_target

    task_class = load_target(cfg.task._target_, "task._target_")
    return task_class(cfg).run()
