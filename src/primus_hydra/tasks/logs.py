"""task=logs task.run=<run dir | sweep dir | Slurm job id> [task.rank=N task.follow=true task.lines=100]: a run's
log, wherever its launcher put it. A local run: its primus.log (task.rank=N: logs/rank_N.log). A Slurm job
(.primus/slurm_job.json): submitit's stdout and stderr of its first task (task.rank=N: logs/rank_N.log, else
submitit's files of task N), in the submitit folder the record names. A sweep dir: each run's, one after the other.
task.follow=true keeps printing what is appended until the run ends (its run-dir lock is free, or Slurm no longer
lists its job) or Ctrl-C."""
from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.errors import PrimusError
from primus_hydra.launch.run_dir_lock import RUN_DIR_LOCKS, RunDirBusyError
from primus_hydra.launch.slurm.submission import read_submission
from primus_hydra.tasks.run_lookup import runs_of

FOLLOW_POLL_S = 0.5


class LogsTask:
    writes_nothing = True  # a query: no run dir (tasks/callback.py)

    def __init__(self, cfg: DictConfig, job: Any = None, point: Optional[dict] = None):
        self.cfg = cfg

    def run(self) -> list[Path]:
        task = self.cfg.task
        if int(task.lines) < 0:
            raise PrimusError(f"task.lines={task.lines}: must be >= 0 (how many of the last lines to print)")
        if task.rank is not None and int(task.rank) < 0:
            raise PrimusError(f"task.rank={task.rank}: must be >= 0, or null for the run's own log")
        run_dirs = runs_of(task.run)
        files = []
        for run_dir in run_dirs:
            found = log_files(run_dir, task.rank)
            if not found and len(run_dirs) == 1:
                which = "its own log" if task.rank is None else f"a log of rank {task.rank}"
                raise PrimusError(f"task.run={task.run}: {run_dir} has no {which} yet (primus.log, logs/rank_N.log, "
                                  "the Slurm job's output); a queued job has none until it starts")
            files += found
        many = len(files) > 1
        for path in files:
            print_tail(path, int(task.lines), header=many)
        if task.follow:
            follow(files, run_dirs)
        return files


def log_files(run_dir: Path, rank: Optional[int]) -> list[Path]:
    """The run's log files, in the order they are printed."""
    record = read_submission(run_dir)
    if rank is not None:
        rank_log = run_dir / "logs" / f"rank_{rank}.log"
        if rank_log.is_file() or record is None:
            return [rank_log] if rank_log.is_file() else []
        return slurm_output_files(record, rank)
    if record is not None and "job_id" in record:
        return slurm_output_files(record, 0)
    return [run_dir / "primus.log"] if (run_dir / "primus.log").is_file() else []


def slurm_output_files(record: dict, task_id: int) -> list[Path]:
    """submitit's `<job id>_<task>_log.out` and `.err` of the job (an array point's id is `<array>_<index>`)."""
    folder = Path(str(record.get("submitit_folder", "")))
    job_id = str(record["job_id"])
    found = [folder / f"{job_id}_{task_id}_log.{kind}" for kind in ("out", "err")]
    return [path for path in found if path.is_file()]


def print_tail(path: Path, lines: int, *, header: bool) -> None:
    if header:
        print(f"==> {path} <==", flush=True)
    with open(path, errors="replace") as handle:
        tail = deque(handle, maxlen=lines) if lines else ()
    sys.stdout.write("".join(tail))
    sys.stdout.flush()


def follow(files: list[Path], run_dirs: list[Path]) -> None:
    """Print what is appended to `files` until every run has ended, or Ctrl-C."""
    offsets = {path: path.stat().st_size for path in files}
    try:
        while True:
            ended = not any(still_running(run_dir) for run_dir in run_dirs)
            for path in files:
                with open(path, errors="replace") as handle:
                    handle.seek(offsets[path])
                    text = handle.read()
                    offsets[path] = handle.tell()
                if text:
                    sys.stdout.write(text if len(files) == 1 else f"==> {path} <==\n{text}")
                    sys.stdout.flush()
            if ended:  # the last read came after the end: nothing more will be written
                return
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return


def still_running(run_dir: Path) -> bool:
    """A local run holds its run-dir lock while it runs; a Slurm job is running while Slurm lists it as live."""
    record = read_submission(run_dir)
    if record is not None and "job_id" in record:
        from primus_hydra.launch.slurm.cluster import SlurmQueryError, queued_jobs

        try:
            job = queued_jobs([str(record["job_id"])]).get(str(record["job_id"]))
        except SlurmQueryError:
            return False
        return job is not None and job.live
    try:
        RUN_DIR_LOCKS.check_free(run_dir)
    except RunDirBusyError:
        return True
    return False
