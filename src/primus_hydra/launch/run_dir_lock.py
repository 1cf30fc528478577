"""One run per run dir: the process that owns a run holds an exclusive lock on `<run_dir>/.primus/run.lock`.

A second run pointed at the same folder (the same hydra.run.dir, a resume started while the first still trains)
is refused at once, naming the holder, before Hydra rewrites `.hydra/` or anything else of the first run's. The
lock is flock(2): the OS releases it when its holder dies, however it dies, so a crashed run never leaves a stale
lock behind; the file stays (it records the last holder) and is never deleted, which would race a newcomer.

Who holds it: the orchestrator for a local run (its elastic agent's workers are its children), rank 0 of a job
started by torchrun/srun, rank 0 (srun mode) or the first node's agent (torchrun mode) of a Slurm job.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Iterator

from primus_hydra.errors import PrimusError

LOCK_FILE = Path(".primus") / "run.lock"


class RunDirBusyError(PrimusError):
    """Another live process holds the run dir."""


class RunDirLocks:
    """The run dirs this process holds (each an open file descriptor carrying the flock)."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    def holds(self, run_dir: Path) -> bool:
        return os.path.abspath(run_dir) in self._held

    def acquire(self, run_dir: Path) -> bool:
        """Take the lock (RunDirBusyError when another process has it). False when this process held it already."""
        key = os.path.abspath(run_dir)
        if key in self._held:
            return False
        path = Path(key) / LOCK_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(fd)
            os.close(fd)
            raise RunDirBusyError(
                f"run dir {key} is in use by another run ({holder}); wait for it to end, or choose another "
                "hydra.run.dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode() + b"\n")
        self._held[key] = fd
        return True

    def release(self, run_dir: Path) -> None:
        fd = self._held.pop(os.path.abspath(run_dir), None)
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock

    def check_free(self, run_dir: Path) -> None:
        """RunDirBusyError when another process holds it; takes nothing and creates nothing."""
        key = os.path.abspath(run_dir)
        path = Path(key) / LOCK_FILE
        if key in self._held or not path.exists():
            return
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusyError(
                f"run dir {key} is in use by another run ({_describe_holder(fd)}); wait for it to end, or choose "
                "another hydra.run.dir") from None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def holding(self, run_dir: Path) -> Iterator[None]:
        """Held for the block (released after it if this block took it)."""
        took = self.acquire(run_dir)
        try:
            yield
        finally:
            if took:
                self.release(run_dir)


def _describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {holder['pid']} on {holder['host']}, since {holder['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not recorded itself yet"


RUN_DIR_LOCKS = RunDirLocks()
