"""What a local sweep reports: one progress line per point, and the summary table (stderr, summary.json, summary.md)."""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import sys
from pathlib import Path
from typing import Any, Optional

from primus_hydra.launch.sweep.labels import shown
from primus_hydra.util.tables import aligned_table


@dataclasses.dataclass
class PointOutcome:
    job: int  # hydra.job.num
    overrides: list
    run_dir: str
    status: str = "not started"  # ok | failed | killed | interrupted | not started
    started: Optional[float] = None  # epoch seconds, taken by the parent around the point's process
    ended: Optional[float] = None
    objective: Optional[float] = None  # what the point's task returned (task.objective for training)
    error: str = ""  # first line of the error
    exit_code: Optional[int] = None
    pinning: str = ""
    pid: Optional[int] = None  # of the point's process (and its process group)
    peak_host_gib: Optional[float] = None
    peak_device_gib: Optional[float] = None
    working_dir: Optional[str] = None  # Hydra's JobReturn.working_dir, as the point's run_job had it
    return_value: Any = dataclasses.field(default=None, repr=False)  # the task's own, handed back to Hydra

    @property
    def wall_s(self) -> Optional[float]:
        if self.started is None or self.ended is None:
            return None
        return round(self.ended - self.started, 2)

    @property
    def label(self) -> str:
        return f"job {self.job} ({shown(self.overrides)})" if self.overrides else f"job {self.job}"

    def to_dict(self) -> dict:
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "return_value"}
        return {**fields, "wall_s": self.wall_s}


def say(line: str) -> None:
    """A progress or summary line of the sweep, on stderr at once."""
    print(line, file=sys.stderr, flush=True)


def objective_of(return_value: Any) -> Optional[float]:
    """A training task returns its objective (task.objective); other tasks may return anything."""
    if isinstance(return_value, numbers.Real) and not isinstance(return_value, bool):
        return float(return_value)
    return None


def start_line(outcome: PointOutcome) -> str:
    return f"[start] {outcome.label}: {outcome.pinning}"


def end_line(outcome: PointOutcome, done: int, total: int) -> str:
    parts = [f"[{done}/{total} done] {outcome.label} {outcome.status}"]
    if outcome.wall_s is not None:
        parts.append(f"{outcome.wall_s:.1f} s")
    if outcome.objective is not None:
        parts.append(f"objective {_format_loss(outcome.objective)}")
    if outcome.error:
        parts.append(f"| {outcome.error}")
    return " ".join(parts)


def _format_loss(loss: Optional[float]) -> str:
    if loss is None:
        return "-"
    return "nan" if math.isnan(loss) else f"{loss:.4f}"


_COLUMNS = ("point", "overrides", "status", "wall time", "objective", "run dir")


def _rows(outcomes: list) -> list:
    rows = []
    for outcome in outcomes:
        status = outcome.status if not outcome.error else f"{outcome.status}: {outcome.error}"
        wall = "-" if outcome.wall_s is None else f"{outcome.wall_s:.1f} s"
        rows.append((str(outcome.job), shown(outcome.overrides) or "-", status, wall,
                     _format_loss(outcome.objective), outcome.run_dir))
    return rows


def format_table(outcomes: list) -> str:
    return aligned_table(_COLUMNS, _rows(outcomes), rule=True)


def format_markdown(outcomes: list) -> str:
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for row in _rows(outcomes):
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return "\n".join(lines) + "\n"


def write_summary(sweep_dir: Path, outcomes: list, extra: dict) -> None:
    counts: dict = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    document = {**extra, "counts": counts, "points": [outcome.to_dict() for outcome in outcomes]}
    (sweep_dir / "summary.json").write_text(json.dumps(document, indent=2) + "\n")
    (sweep_dir / "summary.md").write_text(format_markdown(outcomes))
