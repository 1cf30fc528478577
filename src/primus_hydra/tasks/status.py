"""task=status: what became of submitted runs, read from their run dirs (.primus/slurm_job.json, metrics.jsonl,
checkpoints/latest) and from Slurm's accounting (sacct). Prints a table; never writes anything."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.errors import PrimusError
from primus_hydra.launch.slurm.submission import SUBMISSION_RECORD, read_submission
from primus_hydra.tables import aligned_table

SACCT_TIMEOUT_S = 10


@dataclass
class RunStatus:
    run_dir: Path
    job_id: str
    label: str
    state: str
    step: Optional[int]
    loss: Optional[float]


class StatusTask:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    def run(self) -> list[RunStatus]:
        roots = [Path(self.cfg.task.runs)] if self.cfg.task.runs else default_roots()
        missing = [str(root) for root in roots if self.cfg.task.runs and not root.exists()]
        if missing:
            raise PrimusError(f"task.runs={missing[0]}: no such directory; give a run or sweep dir")
        run_dirs = find_submitted_runs(roots)
        records = [read_submission(run_dir) or {} for run_dir in run_dirs]
        states = sacct_states([str(record["job_id"]) for record in records if "job_id" in record])
        statuses = [run_status(run_dir, states) for run_dir in run_dirs]
        print(format_status_table(statuses, roots))
        return statuses


def default_roots() -> list[Path]:
    root = os.environ.get("PRIMUS_OUTPUT_ROOT")
    return [Path(root)] if root else [Path("outputs"), Path("multirun")]


def find_submitted_runs(roots: list[Path]) -> list[Path]:
    found = set()
    for root in roots:
        if (root / SUBMISSION_RECORD).is_file():
            found.add(root)
        found.update(path.parent.parent for path in root.glob(f"**/{SUBMISSION_RECORD}"))
    return sorted(found)


def sacct_states(job_ids: list[str]) -> dict[str, str]:
    """Job id -> state from sacct (one call); an empty dict when sacct is missing or does not answer."""
    if not job_ids or shutil.which("sacct") is None:
        return {}
    command = ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(job_ids)]
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=SACCT_TIMEOUT_S, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    states = {}
    for line in output.splitlines():
        job_id, _, state = line.partition("|")
        if job_id:
            states[job_id.strip()] = state.split()[0] if state.strip() else "UNKNOWN"
    return states


def run_status(run_dir: Path, states: dict[str, str]) -> RunStatus:
    record = read_submission(run_dir) or {}
    job_id = str(record.get("job_id", "?"))
    step, loss = last_metrics(run_dir / "metrics.jsonl")
    state = f"UNREADABLE ({record['unreadable']})" if "unreadable" in record else states.get(
        job_id, "UNKNOWN (not in sacct)")
    return RunStatus(run_dir=run_dir, job_id=job_id, label=str(record.get("label", "")), state=state, step=step,
                     loss=loss)


def last_metrics(path: Path) -> tuple[Optional[int], Optional[float]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record.get("step"), record.get("loss")
    return None, None


def format_status_table(statuses: list[RunStatus], roots: list[Path]) -> str:
    if not statuses:
        return f"no submitted runs under {', '.join(str(root) for root in roots)}"
    rows = [(status.job_id, status.state, "-" if status.step is None else str(status.step),
             "-" if status.loss is None else f"{status.loss:.4f}", status.label, str(status.run_dir))
            for status in statuses]
    return aligned_table(("job", "state", "step", "loss", "point", "run dir"), rows)

