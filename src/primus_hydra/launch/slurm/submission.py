"""Submit prepared jobs to Slurm through submitit: one job, or one job array per job shape.

Runs on the submitting machine. Every job was prepared for its Slurm world size (orchestrator/prepare.py) before
anything is written; submitting writes its config to <run_dir>/.primus/job_config.yaml, which the nodes read and
trust (no recomposition, no second validation).

A run dir belongs to one job at a time: a submission into a run dir whose job is still queued or running is
refused (naming the job and its scancel line), and an earlier, finished job's config and record are kept beside
the new ones under its job id, never rewritten. Submissions into one run dir take turns (a lock on the folder).
A submission that fails leaves nothing behind: no job config, no submitit script or pickle.
"""
from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import time
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

from primus_hydra.errors import PrimusError
from primus_hydra.launch.job_config import JOB_CONFIG_FILE, write_job_config
from primus_hydra.launch.provenance import GIT_DIFF_FILE, PROVENANCE_FILE, record_provenance
from primus_hydra.launch.run_dir_lock import RunDirBusyError
from primus_hydra.launch.slurm.cluster import SlurmQueryError, queued_jobs
from primus_hydra.launch.slurm.entry import SlurmJobEntry
from primus_hydra.launch.slurm.frozen_code import FrozenCode, freeze_project_code, remove_frozen
from primus_hydra.launch.slurm.job_shape import SlurmJobShape, executor_parameters, job_shape
from primus_hydra.orchestrator.prepare import PreparedJob, translate_in_run_dir

log = logging.getLogger(__name__)

SUBMISSION_RECORD = Path(".primus") / "slurm_job.json"


@dataclass
class StagedJob:
    """A prepared job and where it goes, ready to submit (its config is written when it is submitted)."""

    label: str  # "run" or "job N: overrides", for messages
    run_dir: Path
    shape: SlurmJobShape
    entry: SlurmJobEntry
    prepared: PreparedJob


@dataclass
class SubmittedJob:
    staged: StagedJob
    job: Any  # submitit.SlurmJob

    @property
    def job_id(self) -> str:
        return str(self.job.job_id)


def stage_job(job: PreparedJob, run_dir: Path, settings: Mapping[str, Any], label: str = "run") -> StagedJob:
    shape = job_shape(job.cfg, settings)
    run_dir.mkdir(parents=True, exist_ok=True)
    if job.translation is None:  # a sweep's point, prepared before its run dir was known
        translate_in_run_dir(job, run_dir)
    entry = SlurmJobEntry(job_config=str((run_dir / JOB_CONFIG_FILE).resolve()), run_dir=str(run_dir.resolve()),
                          mode=str(shape.mode))
    return StagedJob(label=label, run_dir=run_dir, shape=shape, entry=entry, prepared=job)


def refuse_live_jobs(run_dirs: list[Path], dir_key: str) -> None:
    """RunDirBusyError (one line) when a run dir's recorded job is still queued or running; also when squeue
    cannot tell, since a second job would rewrite the config the first one reads. Writes nothing."""
    recorded = {}
    for run_dir in run_dirs:
        record = read_submission(run_dir) or {}
        if "job_id" in record:
            recorded[str(record["job_id"])] = run_dir
    if not recorded:
        return
    try:
        queued = queued_jobs(recorded)
    except SlurmQueryError as error:
        job_id, run_dir = next(iter(recorded.items()))
        raise RunDirBusyError(
            f"run dir {run_dir} holds slurm job {job_id}, and whether it still runs cannot be told ({error}); submit "
            f"again when squeue answers, or choose another {dir_key}") from None
    for job_id, run_dir in recorded.items():
        job = queued.get(job_id)
        if job is not None and job.live:
            raise RunDirBusyError(
                f"run dir {run_dir}: slurm job {job_id} is still {job.describe()} there, with its own config; wait "
                f"for it to end, stop it with: scancel {job_id}, or choose another {dir_key}")


def submit_jobs(staged: list[StagedJob], settings: Mapping[str, Any], base_dir: Path,
                dir_key: str = "hydra.run.dir") -> list[SubmittedJob]:
    """Jobs of the same shape go out as one array (Slurm arrays share their resources); each job's id is
    recorded in its run dir for task=status."""
    folder = settings.get("submitit_folder") or str(base_dir / ".submitit" / "%j")
    submitted: list[SubmittedJob] = []
    with contextlib.ExitStack() as turns:
        for run_dir in sorted({job.run_dir.resolve() for job in staged}):  # one order: two sweeps never deadlock
            turns.enter_context(_submission_turn(run_dir))
        refuse_live_jobs([job.run_dir for job in staged], dir_key)
        freezing = [job.prepared.cfg for job in staged if _freezes(job)]
        frozen = freeze_project_code(base_dir, freezing) if freezing else None
        try:
            for shape, group in groupby(staged, key=lambda job: job.shape):
                group = list(group)
                jobs = _submit_group(group, shape, settings, folder, already=submitted, frozen=frozen)
                for job, slurm_job in zip(group, jobs):
                    submitted.append(SubmittedJob(staged=job, job=slurm_job))
                    _record_submission(submitted[-1])
        except BaseException:
            if not submitted:  # no job runs it
                remove_frozen(frozen)
            raise
    return submitted


def _freezes(job: StagedJob) -> bool:
    return bool(job.prepared.cfg.launch.get("freeze_code", True))


def _submit_group(group: list[StagedJob], shape: SlurmJobShape, settings: Mapping[str, Any], folder: str,
                  already: list[SubmittedJob], frozen: Optional[FrozenCode] = None) -> list[Any]:
    import submitit

    leftovers = _SubmititLeftovers(submitit.core.utils.JobPaths.get_first_id_independent_folder(folder))
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=int(settings.get("max_num_timeout", 3)))
    parameters = executor_parameters(settings, shape, str(settings.get("name") or "primus"))
    frozen = frozen if _freezes(group[0]) else None
    if frozen is not None:  # the nodes import the submitted code, also when Slurm reruns the script
        parameters["setup"] = [*frozen.setup_lines, *parameters["setup"]]
    executor.update_parameters(**parameters)
    undo: list[Callable[[], None]] = []
    try:
        for job in group:
            undo.append(_write_config(job, frozen))
        # submitit prints sbatch's stderr before raising it: it is in our one line instead
        with contextlib.redirect_stderr(io.StringIO()):
            if len(group) == 1:
                return [executor.submit(group[0].entry)]
            with executor.batch():
                return [executor.submit(job.entry) for job in group]
    except BaseException as error:
        leftovers.remove()
        for step in reversed(undo):
            step()
        if not isinstance(error, (submitit.core.utils.FailedJobError, OSError)):
            raise
        raise PrimusError(_submission_failure(error, len(group), already)) from None


def _submission_failure(error: BaseException, count: int, already: list[SubmittedJob]) -> str:
    lines = [line.strip().removeprefix("sbatch: error: ") for line in str(error).splitlines() if line.strip()]
    reason = "; ".join(lines) or type(error).__name__
    message = f"sbatch refused {'the job' if count == 1 else f'{count} jobs'}: {reason}; nothing of it was queued"
    if already:
        ids = " ".join(job.job_id for job in already)
        message += f" (queued before it: {ids}; stop them with: scancel {ids})"
    return message + "; fix the request (hydra.launcher.*) and submit again"


@contextlib.contextmanager
def _submission_turn(run_dir: Path) -> Iterator[None]:
    """An exclusive flock on the run dir itself (no file is made): from the liveness check to the record."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_config(job: StagedJob, frozen: Optional[FrozenCode] = None) -> Callable[[], None]:
    """Write the config the job's nodes read. An earlier submission's config and record are first moved aside,
    named after its job id; what was there before comes back when the submission fails (the returned undo)."""
    primus_dir = job.run_dir / JOB_CONFIG_FILE.parent
    made_dir = not primus_dir.exists()
    target, record = job.run_dir / JOB_CONFIG_FILE, job.run_dir / SUBMISSION_RECORD
    earlier = (read_submission(job.run_dir) or {}).get("job_id")
    moved = []
    if earlier is not None:
        for path in (target, record):
            if path.exists():
                kept = path.with_name(f"{path.stem}.{earlier}{path.suffix}")
                path.replace(kept)
                moved.append((kept, path))
    before = target.read_bytes() if target.exists() else None  # a local run's config in this run dir
    provenance = job.run_dir / PROVENANCE_FILE
    provenance_before = provenance.read_bytes() if provenance.exists() else None
    write_job_config(job.prepared, job.run_dir)
    code = frozen.record() if frozen is not None else {"frozen": False, "why": "launch.freeze_code=false"}
    # the job's start on its node appends to it
    record_provenance(job.run_dir, job.prepared.cfg, launcher="slurm", frozen_code=code)

    def undo() -> None:
        if before is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(before)
        for kept, path in moved:
            kept.replace(path)
        if provenance_before is None:
            provenance.unlink(missing_ok=True)
            (job.run_dir / GIT_DIFF_FILE).unlink(missing_ok=True)
        else:
            provenance.write_bytes(provenance_before)
        if made_dir:
            with contextlib.suppress(OSError):
                primus_dir.rmdir()

    return undo


class _SubmititLeftovers:
    """The script and pickles submitit writes into its folder before sbatch answers: removed when it failed."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.existed = folder.exists()
        self.before = set(os.listdir(folder)) if self.existed else set()

    def remove(self) -> None:
        if not self.folder.exists():
            return
        for name in set(os.listdir(self.folder)) - self.before:
            if name.endswith(".pkl") or name.startswith(".submission_file_"):
                (self.folder / name).unlink(missing_ok=True)
        if not self.existed:
            with contextlib.suppress(OSError):
                self.folder.rmdir()


def _record_submission(submitted: SubmittedJob) -> None:
    shape = submitted.staged.shape
    record = {
        "job_id": submitted.job_id,
        "label": submitted.staged.label,
        "submitit_folder": str(Path(submitted.job.paths.folder).resolve()),
        "mode": shape.mode,
        "nodes": shape.nodes,
        "tasks_per_node": shape.tasks_per_node,
        "world_size": shape.world_size,
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    target = submitted.staged.run_dir / SUBMISSION_RECORD
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=2) + "\n")


def read_submission(run_dir: Path) -> Optional[dict]:
    """The run's submission record; None when there is none. A record that cannot be read (corrupt, not an
    object, no job id) comes back as {"unreadable": why}, so that one bad file never hides the other runs."""
    path = Path(run_dir) / SUBMISSION_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:  # ValueError covers bad JSON and bytes that are not UTF-8
        return {"unreadable": f"{SUBMISSION_RECORD} is not JSON ({type(error).__name__})"}
    if not isinstance(record, dict):
        return {"unreadable": f"{SUBMISSION_RECORD} holds a {type(record).__name__}, not an object"}
    if not str(record.get("job_id") or "").strip():
        return {"unreadable": f"{SUBMISSION_RECORD} has no job_id"}
    return record
