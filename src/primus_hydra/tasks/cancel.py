"""task=cancel task.run=<run dir | sweep dir | Slurm job id>: stop runs and record it in their run dirs.

A Slurm run (.primus/slurm_job.json): `scancel` of its job (an array point: that point), then wait until Slurm no
longer lists it as live; task=status then shows it as `CANCELLED by user`. A local run: SIGTERM to the process
group of the process that holds its run-dir lock (launch/run_dir_lock.py records its pid), on this host only;
with module.checkpoint.on_signal=true the run writes a checkpoint at the end of its step before it stops. Either
way `.primus/cancel.json` records who cancelled and when. A run that is not running is left as it is (said once).
"""
from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.errors import PrimusError
from primus_hydra.launch.run_dir_lock import LOCK_FILE, RUN_DIR_LOCKS, RunDirBusyError
from primus_hydra.launch.slurm.cluster import SlurmQueryError, queued_jobs, run_query
from primus_hydra.launch.slurm.submission import read_submission
from primus_hydra.tasks.run_lookup import runs_of
from primus_hydra.tasks.status import CANCEL_RECORD

SLURM_WAIT_S = 60.0
LOCAL_WAIT_S = 120.0  # long enough for an on_signal checkpoint (launch.shutdown_timeout_s is 30 s by default)
POLL_S = 0.5


class CancelTask:
    writes_nothing = True  # no run dir for the command itself (tasks/callback.py)

    def __init__(self, cfg: DictConfig, job: Any = None, point: Optional[dict] = None):
        self.cfg = cfg

    def run(self) -> list[str]:
        run_dirs = runs_of(self.cfg.task.run)
        slurm = {str(record["job_id"]): run_dir for run_dir in run_dirs
                 if "job_id" in (record := read_submission(run_dir) or {})}
        local = [run_dir for run_dir in run_dirs if run_dir not in slurm.values()]
        outcomes = cancel_slurm_jobs(slurm) if slurm else []
        outcomes += [cancel_local_run(run_dir) for run_dir in local]
        for line in outcomes:
            print(line, flush=True)
        return outcomes


def cancel_slurm_jobs(jobs: dict[str, Path]) -> list[str]:
    """scancel the jobs that are still live, wait until Slurm lists none of them as live, record the cancel."""
    try:
        live = {job_id for job_id, job in queued_jobs(jobs).items() if job.live}
    except SlurmQueryError as error:
        raise PrimusError(f"cannot ask Slurm about job(s) {' '.join(jobs)} ({error}); nothing was cancelled") from None
    if live:
        run_query(["scancel", *sorted(live)])
    deadline = time.monotonic() + SLURM_WAIT_S
    while live and time.monotonic() < deadline:
        still = {job_id for job_id, job in queued_jobs(live).items() if job.live}
        if not still:
            break
        time.sleep(POLL_S)
    else:
        if live:
            raise PrimusError(f"scancel {' '.join(sorted(live))}: Slurm still lists them as live after "
                              f"{SLURM_WAIT_S:g} s; check with squeue")
    lines = []
    for job_id, run_dir in jobs.items():
        if job_id in live:
            write_cancel_record(run_dir, {"slurm_job_id": job_id})
            lines.append(f"cancelled slurm job {job_id}: {run_dir}")
        else:
            lines.append(f"slurm job {job_id} had ended already: {run_dir} (nothing to cancel)")
    return lines


def cancel_local_run(run_dir: Path) -> str:
    holder = lock_holder(run_dir)
    if holder is None:
        return f"not running: {run_dir} (its run-dir lock is free; nothing to cancel)"
    pid, host = int(holder["pid"]), str(holder.get("host", ""))
    if host != socket.gethostname():
        raise PrimusError(f"task.run={run_dir}: the run is held by pid {pid} on {host}, not this host "
                          f"({socket.gethostname()}); run task=cancel there")
    signal_run(pid)
    deadline = time.monotonic() + LOCAL_WAIT_S
    while lock_holder(run_dir) is not None:
        if time.monotonic() > deadline:
            raise PrimusError(f"task.run={run_dir}: pid {pid} got SIGTERM but still holds the run after "
                              f"{LOCAL_WAIT_S:g} s; stop it with: kill -KILL {pid}")
        time.sleep(POLL_S)
    write_cancel_record(run_dir, {"pid": pid})
    return f"cancelled local run (pid {pid}): {run_dir}"


def lock_holder(run_dir: Path) -> Optional[dict]:
    """What the run-dir lock's holder recorded, when a live process holds it; None when it is free."""
    try:
        RUN_DIR_LOCKS.check_free(run_dir)
        return None
    except RunDirBusyError:
        pass
    try:
        holder = json.loads((run_dir / LOCK_FILE).read_text())
        int(holder["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        raise PrimusError(f"task.run={run_dir}: a process holds the run but has not recorded its pid in "
                          f"{LOCK_FILE} yet; try again in a moment") from None
    return holder


def signal_run(pid: int) -> None:
    """SIGTERM to the run's process group (its elastic agent and workers), or to the process alone when it shares
    this command's group (a run started from this same shell script without job control)."""
    try:
        group = os.getpgid(pid)
        if group == os.getpgrp():
            os.kill(pid, signal.SIGTERM)
        else:
            os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return  # it ended between the lock check and the signal


def write_cancel_record(run_dir: Path, what: dict) -> None:
    record = {"cancelled_by": getpass.getuser(), "host": socket.gethostname(),
              "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **what}
    target = run_dir / CANCEL_RECORD
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=2) + "\n")

