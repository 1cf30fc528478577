"""The trackers behind logger.use: csv, mlflow, wandb. Each runs only on the trackers' thread (tracking.py), imports
its library there, and keeps what continues its run (ids) in the `state` dict tracking.py persists.

A sink: `start(run, state)` opens or continues the tracker run; `last_logged_step()` what the tracker holds;
`log_records([(time, record), ...])`; `finish(summary, artifacts, failed)`.
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from primus_hydra.backends.common.tracking import TrackedRun

CSV_FILE = "metrics.csv"
CSV_COLUMNS = ("step", "loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu")


def numeric_fields(record: dict) -> dict[str, float]:
    """The record's numbers a tracker can plot (not the step; no None, bool or NaN)."""
    return {key: float(value) for key, value in record.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(float(value))}


class TrackerSink:
    name = ""

    def __init__(self, logger_cfg: Any):
        self.cfg = logger_cfg

    def start(self, run: "TrackedRun", state: dict) -> None:
        raise NotImplementedError

    def last_logged_step(self) -> Optional[int]:
        return None

    def log_records(self, records: list[tuple[float, dict]]) -> None:
        raise NotImplementedError

    def finish(self, summary: dict[str, float], artifacts: list[Path], failed: bool) -> None:
        pass


class CsvSink(TrackerSink):
    """metrics.csv in the run dir: the fixed columns, then any other numeric field of the first record."""

    name = "csv"

    def start(self, run: "TrackedRun", state: dict) -> None:
        self.path = run.run_dir / CSV_FILE
        self.columns: Optional[list[str]] = None
        if self.path.is_file() and state:
            with open(self.path, newline="") as file:
                header = next(csv.reader(file), None)
            self.columns = header or None

    def last_logged_step(self) -> Optional[int]:
        if self.columns is None:
            return 0
        with open(self.path, newline="") as file:
            steps = [int(row["step"]) for row in csv.DictReader(file) if (row.get("step") or "").isdigit()]
        return max(steps, default=None)

    def log_records(self, records: list[tuple[float, dict]]) -> None:
        if self.columns is None:
            first = records[0][1]
            self.columns = [*CSV_COLUMNS, *sorted(key for key in numeric_fields(first) if key not in CSV_COLUMNS)]
            with open(self.path, "w", newline="") as file:
                csv.writer(file).writerow(self.columns)
        with open(self.path, "a", newline="") as file:
            writer = csv.DictWriter(file, self.columns, extrasaction="ignore")
            writer.writerows(record for _, record in records)


class MlflowSink(TrackerSink):
    """MLflow through MlflowClient (no global active run): one run per training run, metrics in batches."""

    name = "mlflow"

    def start(self, run: "TrackedRun", state: dict) -> None:
        # bounded HTTP waits, in MLflow's own variables (a value the user exported wins); read when it imports
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, int(run.timeout_s))))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        cfg = self.cfg.mlflow
        uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        self.client = MlflowClient(tracking_uri=uri)
        if state.get("run_id"):
            self.run_id = state["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment_id = self._experiment_id(cfg.experiment_name)
        tags = {**run.tags, **{str(key): str(value) for key, value in cfg.tags.items()}}
        created = self.client.create_run(experiment_id, tags=tags, run_name=cfg.run_name or run.name)
        self.run_id = created.info.run_id
        state.update(run_id=self.run_id, experiment_id=experiment_id)
        params = [Param(key, value[:MAX_PARAM_VAL_LENGTH]) for key, value in {**run.params, **run.sweep_params}.items()]
        for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[start:start + MAX_PARAMS_TAGS_PER_BATCH])

    def _experiment_id(self, name: str) -> str:
        """The experiment's id, created when missing (sweep points that start together may race to create it)."""
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.client.create_experiment(name)
        except MlflowException:
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def last_logged_step(self) -> Optional[int]:
        history = self.client.get_metric_history(self.run_id, "loss")
        return max((metric.step for metric in history), default=0)

    def log_records(self, records: list[tuple[float, dict]]) -> None:
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        metrics = [Metric(key, value, int(stamp * 1000), record["step"])
                   for stamp, record in records for key, value in numeric_fields(record).items()]
        for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + MAX_METRICS_PER_BATCH])

    def finish(self, summary: dict[str, float], artifacts: list[Path], failed: bool) -> None:
        from mlflow.entities import Metric

        try:
            now = int(time.time() * 1000)
            if summary:
                self.client.log_batch(self.run_id, metrics=[Metric(key, value, now, 0) for key, value in summary.items()])
            for path in artifacts:
                self.client.log_artifact(self.run_id, str(path))
        finally:
            self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class WandbSink(TrackerSink):
    """Weights & Biases: wandb.init with the run id kept, resume="allow"; the API key from WANDB_API_KEY only."""

    name = "wandb"

    def start(self, run: "TrackedRun", state: dict) -> None:
        import wandb

        cfg = self.cfg.wandb
        run_id = state.get("id") or uuid.uuid4().hex[:16]
        folder = Path(cfg.dir) if cfg.dir else run.run_dir
        folder.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(init_timeout=run.timeout_s, silent=True, console="off", x_disable_stats=True,
                                  x_save_requirements=False, save_code=False)
        self.run = wandb.init(project=cfg.project, entity=cfg.entity, group=cfg.group or run.group,
                              name=cfg.name or run.name, tags=list(cfg.tags), mode=str(cfg.mode), dir=str(folder),
                              id=run_id, resume="allow", config={**run.params, **run.sweep_params},
                              settings=settings, reinit="create_new")
        for key, value in run.tags.items():  # W&B tags are labels: the run's facts go to its config as well
            self.run.config.update({f"primus/{key}": value}, allow_val_change=True)
        state.update(id=run_id, project=cfg.project, mode=str(cfg.mode))
        self.timeout_s = run.timeout_s

    def last_logged_step(self) -> Optional[int]:
        """Offline: the largest step in this run id's earlier offline logs, read by wandb's own reader (`wandb leet
        inspect`; a log whose writer was killed may hold nothing); online: unknown here (tracker.json tells)."""
        if str(self.cfg.wandb.mode) != "offline":
            return None
        folder = Path(self.run.dir).parent.parent
        steps = []
        for log_file in folder.glob(f"offline-run-*-{self.run.id}/run-{self.run.id}.wandb"):
            if log_file.parent == Path(self.run.dir).parent:
                continue
            result = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", str(log_file), "--summary",
                                     "--json"], capture_output=True, text=True, timeout=self.timeout_s)
            if result.returncode == 0 and result.stdout.strip():
                steps.append(int(json.loads(result.stdout).get("step") or 0))
        return max(steps, default=0)

    def log_records(self, records: list[tuple[float, dict]]) -> None:
        for _, record in records:
            self.run.log(numeric_fields(record), step=int(record["step"]))

    def finish(self, summary: dict[str, float], artifacts: list[Path], failed: bool) -> None:
        try:
            for key, value in summary.items():
                self.run.summary[key] = value
            for path in artifacts:  # copied into the run's files/ (a file saved from elsewhere is a symlink)
                target = Path(self.run.dir) / path.name
                shutil.copyfile(path, target)
                self.run.save(str(target), base_path=self.run.dir, policy="now")
        finally:
            self.run.finish(exit_code=1 if failed else 0)


SINKS = {sink.name: sink for sink in (CsvSink, MlflowSink, WandbSink)}
