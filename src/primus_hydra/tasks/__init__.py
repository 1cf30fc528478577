"""Tasks, each instantiated by `task._target_`: train, plan, status.

A task class takes the composed config; one that runs a job also has `prepare_job(cfg, run_dir, *, plan=None,
sweep_points=...) -> PreparedJob` (a classmethod), which the single-run callback (tasks/callback.py) and the local sweep call before
the job's run dir exists.
"""
from __future__ import annotations

from omegaconf import DictConfig

from primus_hydra.config.targets import load_target
from primus_hydra.util.environment import restored_environment


def run_task(cfg: DictConfig):
    """Build the task named by `cfg.task._target_` and run it; returns what the task returns (task.objective for training).
    The job's environment is its own: what it set (platform.env, the backend's defaults, patches) is undone after
    it, so that the next job a launcher runs in this process (basic, joblib) sees its own values, not these."""
    task_class = load_target(cfg.task._target_, "task._target_")
    with restored_environment():
        return task_class(cfg).run()

