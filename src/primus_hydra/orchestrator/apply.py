"""The orchestrator resolves the config's `auto` knobs once, before any worker starts, and hoists the env knobs.

Workers load the resolved config (launch/job_config.py) and inherit the hoisted variables; they never decide
either themselves.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from primus_hydra.orchestrator.plan import ResourcePlan, build_resource_plan, write_resources_json


def apply_resource_plan(cfg: DictConfig, *, sweep_points: int = 1) -> ResourcePlan:
    """Build the plan and write its values into cfg's `auto` knobs (launch.nproc_per_node, module.data.num_workers)."""
    plan = build_resource_plan(cfg, sweep_points=sweep_points)
    if plan.auto["launch.nproc_per_node"]:
        cfg.launch.nproc_per_node = plan.nproc_per_node
    if plan.auto["module.data.num_workers"]:
        cfg.module.data.num_workers = plan.num_workers
    return plan


def report_resource_plan(plan: ResourcePlan, run_dir: Path) -> None:
    """The plan of a run that is about to start: the table on stderr, resources.json in its run dir."""
    print(plan.format_table(), file=sys.stderr)
    write_resources_json(plan, run_dir)


@contextlib.contextmanager
def worker_environment(variables: dict[str, str]):
    """Variables for the workers (spawned workers copy this process's environment at start) or for an in-process
    run before it imports torch; the previous values come back afterwards."""
    previous = {key: os.environ.get(key) for key in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
