"""Reading what a run sent to its trackers: MLflow runs and metric histories with MlflowClient, W&B offline logs
with wandb's own reader (`wandb leet inspect`)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def runs_of(uri: str, experiment: str) -> list:
    found = client(uri).get_experiment_by_name(experiment)
    return client(uri).search_runs([found.experiment_id]) if found else []


def wandb_records(run_dir: Path) -> list[list[dict]]:
    """Each offline W&B log under run_dir/wandb, as wandb's reader prints its records (none from a log whose writer
    was SIGKILLed before it wrote a block)."""
    logs = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    return [[json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", str(path), "--json"], capture_output=True, text=True,
        timeout=60).stdout.splitlines() if line.strip()] for path in logs]


def history_steps(records: list[dict]) -> list[int]:
    return [record["history"]["step"]["num"] for record in records if record["type"] == "history"]


def the_run(records: list[dict]) -> dict:
    return next(record["run"] for record in records if record["type"] == "run")
