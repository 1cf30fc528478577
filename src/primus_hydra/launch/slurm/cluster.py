"""Read-only questions to Slurm: what the queue holds (squeue), what a partition's nodes offer (sinfo), what
became of finished jobs (sacct). Each is one call with a timeout; a command that is missing, fails or does not
answer raises SlurmQueryError with its first error line, and each caller says what that means for it."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable, Optional

from primus_hydra.errors import PrimusError

QUERY_TIMEOUT_S = 10
# squeue %T of a job that is not over: it runs, waits, or is on its way back to the queue
LIVE_STATES = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
               "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}
# pending reasons (squeue %r) that no scheduling pass resolves: the request exceeds what the partition, account
# or QOS allows, or waits on something that can no longer happen
NEVER_STARTS_REASONS = {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
                        "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed",
                        "DependencyNeverSatisfied", "QOSMaxNodePerJobLimit", "QOSMaxCpuPerJobLimit",
                        "QOSMaxWallDurationPerJobLimit", "QOSMaxGRESPerJob", "QOSMaxMemoryPerJob"}


class SlurmQueryError(PrimusError):
    """A Slurm command did not answer; the message is one line."""

    exit_code = 1


@dataclass(frozen=True)
class QueuedJob:
    state: str  # squeue %T: PENDING, RUNNING, REQUEUED, ... or a final state while slurmctld still lists the job
    reason: str  # squeue %r: why it waits ("None" when it does not)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def describe(self) -> str:
        return f"{self.state} ({self.reason})" if self.state == "PENDING" and self.reason not in ("", "None") else self.state


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    time_limit_min: Optional[int]  # the partition's MaxTime; None: unlimited


def run_query(command: list[str]) -> str:
    """The command's stdout; SlurmQueryError (one line) when it is missing, fails or times out."""
    if shutil.which(command[0]) is None:
        raise SlurmQueryError(f"{command[0]} is not on PATH")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmQueryError(f"{command[0]} did not answer within {QUERY_TIMEOUT_S} s") from None
    except OSError as error:
        raise SlurmQueryError(f"{command[0]} could not run: {error}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        # the last error line is the cause ("Problem talking to the database", "Unable to contact slurm controller")
        raise SlurmQueryError(f"{command[0]} failed (exit {done.returncode}): {lines[-1] if lines else 'no output'}")
    return done.stdout


def queued_jobs(job_ids: Iterable[str]) -> dict[str, QueuedJob]:
    """The jobs slurmctld still lists (also finished ones, for MinJobAge); array tasks by `<array>_<task>`."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    try:
        output = run_query(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%r"])
    except SlurmQueryError as error:
        if "Invalid job id" in str(error):  # the only id asked for is gone from slurmctld's memory
            return {}
        raise
    jobs = {}
    for line in output.splitlines():
        job_id, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if job_id and state:
            jobs[job_id] = QueuedJob(state=state.strip(), reason=reason.strip())
    return jobs


def accounted_states(job_ids: Iterable[str]) -> dict[str, str]:
    """Job id -> its latest state in Slurm's accounting (sacct), e.g. COMPLETED, FAILED, CANCELLED."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    output = run_query(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(ids)])
    states = {}
    for line in output.splitlines():
        job_id, _, state = line.partition("|")
        if job_id.strip():
            states[job_id.strip()] = state.split()[0] if state.strip() else "UNKNOWN"  # "CANCELLED by 0"
    return states


def requeue_cause(job_id: str) -> Optional[str]:
    """How the job's last run ended before it went back to the queue (NODE_FAIL, REQUEUED, PREEMPTED, ...): the
    newest final state among its accounting records (sacct -D keeps one per run); None when it has none."""
    output = run_query(["sacct", "-n", "-P", "-X", "-D", "-o", "JobID,State", "-j", job_id])
    ended = [state.split()[0] for record_id, _, state in (line.partition("|") for line in output.splitlines())
             if record_id.strip() == job_id and state.strip() and state.split()[0] not in LIVE_STATES]
    return ended[-1] if ended else None


def partitions() -> tuple[dict[str, list[SlurmNode]], Optional[str]]:
    """Partition -> its nodes (sinfo), and the default partition's name (None when there is none)."""
    output = run_query(["sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G|%l"])
    nodes: dict[str, list[SlurmNode]] = {}
    default = None
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6:
            continue
        name, partition, cpus, memory, gres, limit = fields
        if partition.endswith("*"):
            partition = default = partition[:-1]
        nodes.setdefault(partition, []).append(SlurmNode(
            name=name, cpus=_leading_int(cpus), memory_mb=_leading_int(memory), gpus=gpu_count(gres),
            time_limit_min=time_limit_minutes(limit)))
    return nodes, default


def gpu_count(gres: str) -> int:
    """GPUs in sinfo's %G: `gpu:8`, `gpu:mi300x:8(S:0-1)`, several comma-separated entries, or `(null)`."""
    total = 0
    for entry in gres.split(","):
        parts = entry.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2:
            total += _leading_int(parts[-1])
    return total


def time_limit_minutes(limit: str) -> Optional[int]:
    """sinfo's %l (`infinite`, `30:00`, `4:00:00`, `2-00:00:00`) in minutes; None: unlimited or unknown."""
    if limit in ("infinite", "UNLIMITED", "n/a", ""):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [int(part) for part in clock.split(":") if part.isdigit()]
    if not parts:
        return None
    hours, minutes = (0, parts[0]) if len(parts) == 1 else ((parts[0], parts[1]) if len(parts) == 3 else (0, parts[0]))
    return (int(days) if days.isdigit() else 0) * 24 * 60 + hours * 60 + minutes


def _leading_int(text: str) -> int:
    digits = ""
    for char in text.strip():
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else 0
