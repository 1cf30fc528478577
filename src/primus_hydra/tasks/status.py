"""task=status: what became of submitted runs, read from their run dirs (.primus/slurm_job.json, metrics.jsonl,
provenance.json's commit, cancel.json) and from Slurm's accounting (sacct). Prints a table (task.format=json: a
JSON list; task.watch=true: again every few seconds); never writes anything.

When sacct fails (slurmdbd or the controller unreachable), the table still shows what the run dirs say, each
state reads `UNKNOWN (sacct failed)`, and the command ends with one error line saying why (exit 1); without
sacct on this machine it warns once and exits 0."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.config.values import without_hydra_node
from primus_hydra.errors import PrimusError
from primus_hydra.launch.provenance import read_provenance
from primus_hydra.launch.slurm.cluster import SlurmQueryError, accounted_states
from primus_hydra.launch.slurm.submission import SUBMISSION_RECORD, read_submission
from primus_hydra.orchestrator.prepare import HANDOFF
from primus_hydra.tasks.objective import METRICS_FILE
from primus_hydra.tasks.plan import handed_over_at
from primus_hydra.util.tables import aligned_table

NOT_IN_SACCT = "UNKNOWN (not in sacct)"
CANCELLED_BY_USER = "CANCELLED by user"
CANCEL_RECORD = Path(".primus") / "cancel.json"  # written by task=cancel
WATCH_INTERVAL_S = 5.0


def cancel_record(run_dir: Path) -> Optional[dict]:
    try:
        record = json.loads((Path(run_dir) / CANCEL_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


@dataclass
class RunStatus:
    run_dir: Path
    job_id: str
    label: str
    state: str
    step: Optional[int]
    loss: Optional[float]
    commit: Optional[str] = None  # the project's commit the run was started from (provenance.json)
    dirty: Optional[bool] = None  # its checkout had uncommitted changes


@dataclass
class StatusQuery:
    """What task=status prepares: the query, checked before anything runs (the local sweep reads these fields)."""

    cfg: DictConfig  # without the `hydra` node
    plan: None = None
    warnings: list = field(default_factory=list)


class StatusTask:
    writes_nothing = True  # a query: no run dir, whatever hydra.run.dir says (tasks/callback.py)
    # under -m (hydra/launcher=primus_local, set by conf/task/status.yaml) the points run in the sweep's process
    runs_sweep_points_in_process = True

    def __init__(self, cfg: DictConfig, job: Optional[StatusQuery] = None, point: Optional[dict] = None):
        self.cfg, self.job, self.point = cfg, job, point

    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None,
                    sweep_points: Optional[int] = None) -> StatusQuery:
        query = without_hydra_node(cfg)
        query_roots(query)
        return StatusQuery(query)

    def run(self) -> list[RunStatus]:
        if self.job is None:  # the single run's query, checked by the callback: nothing more to hand over
            HANDOFF.take(handed_over_at())
        roots = query_roots(self.cfg)
        if self.point is not None:
            print(f"[job {self.point['num']}: {' '.join(self.point['overrides'])}]", flush=True)
        while True:
            statuses = self.report(roots)
            if not self.cfg.task.get("watch", False):
                return statuses
            time.sleep(WATCH_INTERVAL_S)

    def report(self, roots: list[Path]) -> list[RunStatus]:
        run_dirs = find_submitted_runs(roots)
        records = [read_submission(run_dir) or {} for run_dir in run_dirs]
        states, unknown, failure = slurm_states([str(record["job_id"]) for record in records if "job_id" in record])
        statuses = [run_status(run_dir, states, unknown) for run_dir in run_dirs]
        if str(self.cfg.task.get("format", "table")) == "json":
            print(json.dumps([status_document(status) for status in statuses], indent=2), flush=True)
        else:
            if self.cfg.task.get("watch", False):
                print(f"\x1b[2J\x1b[H{time.strftime('%H:%M:%S')} (every {WATCH_INTERVAL_S:g} s; Ctrl-C stops)")
            print(format_status_table(statuses, roots), flush=True)
        if failure is not None:  # after the table: what the run dirs say is worth showing
            raise SlurmQueryError(f"{failure}: the Slurm states above are unknown (steps and losses are the run "
                                  "dirs'); check that slurmctld and slurmdbd run, then ask again") from None
        return statuses


def slurm_states(job_ids: list[str]) -> tuple[dict[str, str], str, Optional[SlurmQueryError]]:
    """Job id -> sacct state; the state a job without one shows; sacct's failure, if it failed."""
    if not job_ids:
        return {}, NOT_IN_SACCT, None
    if shutil.which("sacct") is None:
        print("warning: sacct is not on PATH: the Slurm states are unknown; run task=status where Slurm's "
              "commands are", file=sys.stderr, flush=True)
        return {}, "UNKNOWN (no sacct here)", None
    try:
        return accounted_states(job_ids), NOT_IN_SACCT, None
    except SlurmQueryError as error:
        return {}, "UNKNOWN (sacct failed)", error


def query_roots(cfg: DictConfig) -> list[Path]:
    """The folders task.runs asks about (every submitted run under the output roots when null)."""
    if not cfg.task.runs:
        return default_roots()
    root = Path(cfg.task.runs)
    if not root.is_dir():
        raise PrimusError(f"task.runs={root}: no such directory; give a run or sweep dir")
    return [root]


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


def run_status(run_dir: Path, states: dict[str, str], unknown: str = NOT_IN_SACCT) -> RunStatus:
    record = read_submission(run_dir) or {}
    job_id = str(record.get("job_id", "?"))
    step, loss = last_metrics(run_dir / METRICS_FILE)
    state = f"UNREADABLE ({record['unreadable']})" if "unreadable" in record else states.get(job_id, unknown)
    if state.startswith("CANCELLED") and cancel_record(run_dir) is not None:
        state = CANCELLED_BY_USER
    git = (read_provenance(run_dir) or {}).get("git") or {}
    return RunStatus(run_dir=run_dir, job_id=job_id, label=str(record.get("label", "")), state=state, step=step,
                     loss=loss, commit=git.get("commit"), dirty=git.get("dirty"))


def status_document(status: RunStatus) -> dict:
    document = dataclasses.asdict(status)
    document["run_dir"] = str(status.run_dir)
    return document


def commit_text(status: RunStatus) -> str:
    """The short commit, with `*` when the checkout was dirty; `-` when the run recorded none."""
    return "-" if not status.commit else status.commit[:10] + ("*" if status.dirty else "")


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
             "-" if status.loss is None else f"{status.loss:.4f}", commit_text(status), status.label,
             str(status.run_dir)) for status in statuses]
    return aligned_table(("job", "state", "step", "loss", "commit", "point", "run dir"), rows)

