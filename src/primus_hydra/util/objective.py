"""What a training run returns to whoever ran it (a sweeper such as Optuna, primus_hydra.run, Hydra's JobReturn):
one float, chosen by task.objective and read from the run's metrics.jsonl, so that every launcher (this process, the
elastic agent, Slurm) and a run resumed in its run dir return the same number.

- eval_loss: the last evaluation's held-out loss (module.eval_interval).
- mean_loss: the mean of the last task.objective_window training losses: steadier than one mini-batch.
- loss: the last step's training loss.
- auto: eval_loss when the run evaluates, else mean_loss.

A run that trained nothing (a dry run, or one resumed at or past module.train_iters in a run dir without metrics)
returns NaN, which sweepers record as a failed trial, with one line saying why. task.objective=eval_loss without
module.eval_interval is refused before the run (config/validate.py).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"  # backends' MetricsLogger.METRICS_FILE


def run_objective(cfg: Any, run_dir: Path, *, say: bool) -> float:
    """The run's objective (see the module's text); NaN with a line on stderr (when `say`) if it has none."""
    objective = str(cfg.task.objective)
    if objective == "auto":
        objective = "eval_loss" if cfg.module.eval_interval else "mean_loss"
    if cfg.task.dry_run:
        return _none("a dry run trains nothing", say)
    records = _records(Path(run_dir) / METRICS_FILE)
    if objective == "eval_loss":
        values = [record["eval_loss"] for record in records if record.get("eval_loss") is not None]
        return float(values[-1]) if values else _none(f"no evaluation in {run_dir / METRICS_FILE}", say)
    losses = [record["loss"] for record in records if isinstance(record.get("loss"), (int, float))]
    if not losses:
        return _none(f"no training step in {run_dir / METRICS_FILE} (resumed at or past module.train_iters?)", say)
    if objective == "loss":
        return float(losses[-1])
    window = losses[-int(cfg.task.objective_window):]
    return float(sum(window) / len(window))


def _none(reason: str, say: bool) -> float:
    if say:
        print(f"warning: task.objective is nan: {reason}", file=sys.stderr)
    return math.nan


def _records(path: Path) -> list[dict]:
    """metrics.jsonl's records, the last one per step (a resumed run may have redone steps)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    by_step: dict[Any, dict] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(record, dict):
            by_step[record.get("step")] = record
    return [by_step[step] for step in sorted(by_step, key=lambda step: (step is None, step or 0))]
