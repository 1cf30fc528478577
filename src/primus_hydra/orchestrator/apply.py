"""A job's plan applied around it: reported (the table on stderr, resources.json in the run dir), and its
environment knobs hoisted into the workers' environment. Workers inherit the variables and never decide them."""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from primus_hydra.orchestrator.plan import ResourcePlan, write_resources_json


def report_resource_plan(plan: ResourcePlan, run_dir: Path) -> None:
    """The plan of a run that is about to start: the table on stderr (once while it stays the same), resources.json
    in its run dir."""
    table = new_plan_table(plan)
    if table:
        print(table, file=sys.stderr)
    write_resources_json(plan, run_dir)


_last_plan_shown: list[str] = []  # the decisions of the last table this process printed


def new_plan_table(plan: ResourcePlan) -> str:
    """The plan's table, or "" when this process printed the same decisions last (the points of a sweep run one
    after another here, or a sweeper's batches: Optuna's): the first line's measured free memory may differ."""
    table = plan.format_table()
    decisions = table.split("\n", 1)[-1]
    if _last_plan_shown == [decisions]:
        return ""
    _last_plan_shown[:] = [decisions]
    return table


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
