"""Waiting for submitted jobs on the submitting machine: every state change as it happens, the final state from
Slurm's accounting, rank 0's result, and a failed job's first error as one line (with the logs to read).

While slurmctld lists a job (squeue), its state and pending reason come from there, every poll: a requeue (Slurm's
own after NODE_FAIL, `scontrol requeue`, submitit's after a preemption) shows as it happens, and a job listed as
queued or running is never taken for finished (an earlier attempt's result file may be on disk). A pending reason
that no scheduling pass resolves (cluster.NEVER_STARTS_REASONS) ends the wait with one line. Ctrl-C, SIGTERM and
SIGHUP stop the waiting, not the jobs, and say how to stop them."""
from __future__ import annotations

import contextlib
import pickle
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from primus_hydra.errors import PrimusError
from primus_hydra.launch.slurm.cluster import (
    NEVER_STARTS_REASONS,
    QueuedJob,
    SlurmQueryError,
    queued_jobs,
    requeue_cause,
)
from primus_hydra.launch.slurm.submission import SubmittedJob

FINISHED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                   "DEADLINE", "PREEMPTED"}


@dataclass
class JobOutcome:
    submitted: SubmittedJob
    state: str
    result: Any = None
    error: Optional[str] = None  # one line

    @property
    def ok(self) -> bool:
        return self.error is None


def describe_submission(job: SubmittedJob) -> str:
    shape = job.staged.shape
    return (f"slurm job {job.job_id} [{job.staged.label}]: {shape.nodes} node(s) x {shape.tasks_per_node} task(s), "
            f"{shape.mode} mode, world size {shape.world_size}; run dir {job.staged.run_dir}")


class _StopWaiting(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_signals_end_the_wait() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, a `kill`) end the waiting as Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise _StopWaiting(signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_for_jobs(jobs: list[SubmittedJob], poll_interval_s: float = 2.0, heartbeat_s: float = 30.0) -> list[JobOutcome]:
    """Block until every job has finished; print each state change and a heartbeat line while waiting.
    Ctrl-C (or SIGTERM, SIGHUP) stops the waiting, not the jobs (they are the cluster's now): it says how to
    follow or cancel them, and exits 128 + the signal's number."""
    try:
        with _stop_signals_end_the_wait():
            return _wait(jobs, poll_interval_s, heartbeat_s)
    except (KeyboardInterrupt, _StopWaiting) as stop:
        ids = " ".join(job.job_id for job in jobs)
        name = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else signal.Signals(stop.signum).name
        error = PrimusError(f"stopped waiting ({name}); the job(s) keep running: follow them with task=status, "
                            f"stop them with: scancel {ids}")
        error.exit_code = 128 + (signal.SIGINT if isinstance(stop, KeyboardInterrupt) else stop.signum)
        raise error from None


class JobNeverStartsError(PrimusError):
    exit_code = 1


def _wait(jobs: list[SubmittedJob], poll_interval_s: float, heartbeat_s: float) -> list[JobOutcome]:
    last_state: dict[str, str] = {}
    pending = list(jobs)
    last_heartbeat = time.monotonic()
    outcomes: dict[str, JobOutcome] = {}

    def show(job: SubmittedJob, state: str, note: str = "") -> None:
        if state != last_state.get(job.job_id) and state != "UNKNOWN":  # UNKNOWN: not in sacct yet
            print(f"[slurm] job {job.job_id} [{job.staged.label}]: {state}{note}", file=sys.stderr, flush=True)
            last_state[job.job_id] = state

    while pending:
        queued = _queued(pending)
        for job in list(pending):
            listed = queued.get(job.job_id)
            if listed is not None and listed.live:
                show(job, listed.describe(), _requeue_note(job.job_id, listed, last_state.get(job.job_id)))
                if listed.state == "PENDING" and listed.reason in NEVER_STARTS_REASONS:
                    raise JobNeverStartsError(
                        f"slurm job {job.job_id} [{job.staged.label}] can never start: it is pending with reason "
                        f"{listed.reason} (it asks for more than its partition, account or QOS allows); it stays "
                        f"queued until you stop it with: scancel {job.job_id}")
                continue
            if job.job.done(force_check=True):
                outcome = outcomes[job.job_id] = _outcome(job)
                pending.remove(job)
                result = f"objective {outcome.result:.4f}" if isinstance(outcome.result, float) else ""
                print(f"[slurm] job {job.job_id} [{job.staged.label}]: {outcome.state} {result}".rstrip(),
                      file=sys.stderr, flush=True)
                continue
            show(job, _state(job))
        if pending:
            if time.monotonic() - last_heartbeat >= heartbeat_s:
                states = ", ".join(f"{job.job_id} {last_state.get(job.job_id, '?')}" for job in pending)
                print(f"[slurm] waiting for {len(pending)} job(s): {states}", file=sys.stderr, flush=True)
                last_heartbeat = time.monotonic()
            time.sleep(poll_interval_s)
    return [outcomes[job.job_id] for job in jobs]


def _requeue_note(job_id: str, listed: QueuedJob, shown: Optional[str]) -> str:
    """A job that ran and is queued again was requeued: say how its run ended (NODE_FAIL, ...), from sacct."""
    if listed.state not in ("PENDING", "REQUEUED") or not shown or not shown.startswith(("RUNNING", "COMPLETING")):
        return ""
    try:
        cause = requeue_cause(job_id)
    except SlurmQueryError:
        cause = None
    # REQUEUED: asked for (scontrol requeue, submitit after a preemption); else what ended the run (NODE_FAIL, ...)
    return f", requeued after {cause}" if cause and cause != "REQUEUED" else ", requeued"


def _queued(jobs: list[SubmittedJob]) -> dict[str, QueuedJob]:
    """What squeue says of the jobs; nothing when it does not answer (then sacct, through submitit, decides)."""
    try:
        return queued_jobs(job.job_id for job in jobs)
    except SlurmQueryError:
        return {}


def _state(job: SubmittedJob) -> str:
    try:
        return str(job.job.state).split()[0]
    except Exception:  # sacct hiccups must not end the wait
        return "UNKNOWN"


def _outcome(job: SubmittedJob) -> JobOutcome:
    # the state may lag behind the result file by a moment: read it again
    state = _state(job)
    for _ in range(10):
        if state in FINISHED_STATES:
            break
        time.sleep(0.5)
        job.job.watcher.update()
        state = _state(job)
    try:
        # rank 0 returns the loss; in torchrun mode the node hosting global rank 0 is the rendezvous's choice
        result = next((value for value in job.job.results() if value is not None), None)
    except Exception:  # noqa: BLE001 - submitit raises several kinds; the task files say what happened
        return JobOutcome(job, state if state != "COMPLETED" else "FAILED", error=first_task_error(job, state))
    if state not in ("COMPLETED", "UNKNOWN"):
        return JobOutcome(job, state, error=first_task_error(job, state))
    return JobOutcome(job, "COMPLETED", result=result)


def first_task_error(job: SubmittedJob, state: str) -> str:
    """The first task to fail (its submitit result file is the oldest error: the peers of a crashed rank fail
    after it, in their next collective), else the tail of a task's stderr."""
    tasks = job.staged.shape.nodes * job.staged.shape.tasks_per_node
    task_paths = [job.job.task(task).paths if tasks > 1 else job.job.paths for task in range(tasks)]
    errors = []
    for task, paths in enumerate(task_paths):
        message = _error_from_result(paths.result_pickle)
        if message:
            errors.append((paths.result_pickle.stat().st_mtime, task, message, paths.stderr))
    logs_dir = job.staged.run_dir / "logs"
    if errors:
        _, task, message, stderr = min(errors)
        return f"slurm job {job.job_id} {state}: task {task}: {message}; logs: {stderr}, {logs_dir}"
    tail = next((line for paths in task_paths for line in reversed(_tail(paths.stderr)) if line.strip()),
                "no error recorded")
    return f"slurm job {job.job_id} {state}: {tail}; logs: {task_paths[0].stderr}, {logs_dir}"


def _error_from_result(path: Path) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            status, payload = pickle.load(handle)
    except (OSError, EOFError, pickle.UnpicklingError, ValueError):
        return None
    if status != "error":
        return None
    lines = [line for line in str(payload).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "unknown error"
    name, _, text = last.partition(": ")
    return f"{name.rsplit('.', 1)[-1]}: {text}" if text else last


def _tail(path: Path, lines: int = 20) -> list[str]:
    try:
        return Path(path).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []
