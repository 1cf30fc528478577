"""Running primus-hydra's Slurm launcher on the local cluster as a user would (tests/slurm). Not a test module.

`primus(cwd, ...)` waits for the command; `WaitingCommand` runs it in the background (its stderr in a file the
test reads as it grows), for what happens while it waits: a requeue, a pending reason, a signal."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

from helpers.cli import clean_env
from helpers.overrides import QUIET_LOGS, SMALL_BATCHES
from helpers.slurm_cluster import wait_until

FAST = ["module.warmup_iters=0", *SMALL_BATCHES, "module.log.interval=1", *QUIET_LOGS, "module.checkpoint.save_final=false"]
SLURM = ["platform=slurm", "hydra.launcher.poll_interval_s=0.5", "hydra.launcher.timeout_min=10"]
JOB_TIMEOUT_S = 240
LONGER_STEPS = ["module.seq_length=128"]  # so that a preemption or requeue lands mid-run
# a job that waits in the queue (reason BeginTime) without taking a node: for what happens while one is queued
HELD_IN_QUEUE = "+hydra.launcher.additional_parameters.begin=now+600"


def primus(cwd: Path, *args: str, env: dict | None = None, timeout: int = JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "primus_hydra", *args], capture_output=True, text=True,
                          timeout=timeout, env=clean_env(env), cwd=cwd)


def submission(run_dir: Path) -> dict:
    return json.loads((run_dir / ".primus" / "slurm_job.json").read_text())


def accounted_job_ids() -> set[str]:
    out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobID", "-S", "now-1days"], capture_output=True,
                         text=True, timeout=10, check=False).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def _ids_with_folder_under(output: str, folder: Path) -> list[str]:
    ids = []
    for line in output.splitlines():
        job_id, _, work_dir = line.strip().partition("|")
        if work_dir == str(folder) or work_dir.startswith(f"{folder}/"):
            ids.append(job_id)
    return ids


def accounted_jobs_from(folder: Path) -> list[str]:
    """Ids of the jobs sbatch was run for from `folder` (or below), as accounting recorded them: also a job
    sbatch refused (Slurm records it as FAILED), so that an empty list means that nothing reached Slurm."""
    out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobID,WorkDir", "-S", "now-1days"],
                         capture_output=True, text=True, timeout=10, check=False).stdout
    return _ids_with_folder_under(out, folder)


def queued_jobs_from(folder: Path) -> list[str]:
    """Ids of the jobs submitted from `folder` (or below) that slurmctld lists as pending or running."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%Z"], capture_output=True, text=True, timeout=10, check=False).stdout
    return _ids_with_folder_under(out, folder)


def scancel(job_id: str) -> None:
    subprocess.run(["scancel", job_id], capture_output=True, timeout=30, check=False)


class WaitingCommand:
    """`python -m primus_hydra ARGS` in the background; stderr goes to <cwd>/waiting.stderr."""

    def __init__(self, cwd: Path, *args: str, env: dict | None = None):
        self.stderr_path = Path(cwd) / "waiting.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen([sys.executable, "-m", "primus_hydra", *args], stdout=subprocess.DEVNULL,
                                            stderr=stderr, env=clean_env(env), cwd=cwd)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_for_line(self, text: str, timeout_s: float = 60) -> None:
        def shown() -> bool:
            assert self.process.poll() is None or text in self.stderr, f"exited {self.process.returncode}: {self.stderr}"
            return text in self.stderr

        wait_until(shown, timeout_s=timeout_s)

    def wait_for_match(self, pattern: str, timeout_s: float = 60) -> None:
        def shown() -> bool:
            found = re.search(pattern, self.stderr)
            assert self.process.poll() is None or found, f"exited {self.process.returncode}: {self.stderr}"
            return bool(found)

        wait_until(shown, timeout_s=timeout_s)

    def send(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout_s: float = JOB_TIMEOUT_S) -> int:
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
