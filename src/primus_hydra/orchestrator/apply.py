"""A job's plan applied around it: reported (the table on stderr, resources.json in the run dir), and its
environment knobs hoisted into the workers' environment. Workers inherit the variables and never decide them."""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from primus_hydra.orchestrator.plan import ResourcePlan, write_resources_json


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
