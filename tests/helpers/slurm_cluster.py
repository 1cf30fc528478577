"""Helpers for tests that need the local Slurm cluster (scripts/local_slurm.sh). Not a test module.

`require_slurm()` skips the calling test with a reason when no cluster answers, unless PRIMUS_REQUIRE_SLURM=1
(set by scripts/test.sh after a successful bring-up): then the test fails instead, so CI cannot silently skip.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator, List, Tuple, TypeVar

REPO = Path(__file__).resolve().parents[2]
LOCAL_SLURM = REPO / "scripts" / "local_slurm.sh"
NODES = ("n1", "n2")
# sinfo %t states of a node that runs or can run jobs (comp: a job is completing; plnd: reserved by backfill)
_READY_STATES = {"idle", "mix", "alloc", "comp", "plnd"}

T = TypeVar("T")


def slurm_conf_path() -> str | None:
    """The slurm.conf clients use: $SLURM_CONF, or None when it is unset or missing."""
    conf = os.environ.get("SLURM_CONF")
    return conf if conf and Path(conf).is_file() else None


def _run(cmd: List[str], timeout_s: float = 10.0) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def cluster_available() -> Tuple[bool, str]:
    """(True, "") when SLURM_CONF is set and sinfo answers within 5 s with n1 and n2 usable; else (False, why)."""
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        return False, "SLURM_CONF is not set (bring a cluster up with: bash scripts/local_slurm.sh up)"
    if not Path(conf).is_file():
        return False, f"SLURM_CONF={conf} does not exist"
    try:
        out = _run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout_s=5)
    except FileNotFoundError:
        return False, "sinfo is not installed"
    except subprocess.TimeoutExpired:
        return False, "sinfo did not answer within 5 s (is slurmctld running?)"
    if out.returncode != 0:
        return False, f"sinfo failed: {(out.stderr or out.stdout).strip()[:200]}"
    states = dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)
    # "-" marks a node planned by backfill; any other suffix (idle* = not responding, idle~ = powered down, ...)
    # makes a node unusable
    bad = {n: states.get(n, "missing") for n in NODES if states.get(n, "missing").rstrip("-") not in _READY_STATES}
    if bad:
        return False, "nodes not usable: " + ", ".join(f"{n}={s}" for n, s in sorted(bad.items()))
    return True, ""


def require_slurm() -> None:
    """Skip the calling test when no cluster is available; fail instead when PRIMUS_REQUIRE_SLURM=1."""
    import pytest

    ok, reason = cluster_available()
    if ok:
        return
    if os.environ.get("PRIMUS_REQUIRE_SLURM") == "1":
        pytest.fail(f"PRIMUS_REQUIRE_SLURM=1 but no Slurm cluster: {reason}", pytrace=False)
    pytest.skip(f"no Slurm cluster: {reason}")


def sacct_state(job_id: str | int) -> str:
    """The accounting state of a job's allocation (COMPLETED, FAILED, CANCELLED, ...); "" when not recorded yet."""
    out = _run(["sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State"], timeout_s=10)
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    # "CANCELLED by 0" -> "CANCELLED"; the last line is the latest record of a requeued job
    return lines[-1].split()[0] if lines else ""


def squeue_job_ids() -> List[str]:
    """Ids of all jobs slurmctld still lists (pending, running, completing)."""
    out = _run(["squeue", "-h", "-o", "%i"], timeout_s=10)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def wait_until(predicate: Callable[[], T], timeout_s: float, interval_s: float = 0.2) -> T:
    """Poll `predicate` until it returns something truthy and return that; AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout_s} s: {getattr(predicate, '__name__', predicate)}")
        time.sleep(interval_s)


def local_slurm_home() -> Path | None:
    """The PRIMUS_SLURM_HOME of the cluster SLURM_CONF names, when scripts/local_slurm.sh made it."""
    conf = slurm_conf_path()
    home = Path(conf).parents[1] if conf else None
    return home if home is not None and (home / "env.sh").is_file() else None


@contextlib.contextmanager
def failed_node(node: str) -> Iterator[None]:
    """`node` fails as a machine does: its slurmd and every job process on it are SIGKILLed (slurmd by the pid
    in its pid file, checked to be a slurmd; the job's tasks by their SLURMD_NODENAME, and the slurmstepd above
    each), and slurmctld marks the node down after SlurmdTimeout. Afterwards `local_slurm.sh up` restarts that
    slurmd, and both nodes are usable again before this returns, also when the block fails."""
    import pytest

    home = local_slurm_home()
    if home is None:
        pytest.skip(f"SLURM_CONF={slurm_conf_path()} is not a scripts/local_slurm.sh cluster: no node to fail")
    pid = int((home / "run" / f"slurmd-{node}.pid").read_text().strip())
    assert _comm(pid) == "slurmd", f"pid {pid} is not {node}'s slurmd"
    os.kill(pid, signal.SIGKILL)
    for task in _job_processes_on(node):
        # a simulated node's steps would outlive its slurmd: the task, then the slurmstepd that started it
        for victim in (task, _parent(task)):
            if victim and (victim == task or _comm(victim) == "slurmstepd"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
    try:
        yield
    finally:
        up = subprocess.run(["bash", str(LOCAL_SLURM), "up"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PRIMUS_SLURM_HOME": str(home)}, check=False)
        wait_until(lambda: cluster_available()[0], timeout_s=60)
        assert up.returncode == 0, up.stderr[-2000:]


def _job_processes_on(node: str) -> List[int]:
    """Pids of the processes Slurm started on `node` (their environment says SLURMD_NODENAME=<node>)."""
    mark = f"SLURMD_NODENAME={node}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            with contextlib.suppress(OSError):
                if mark in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    found.append(int(name))
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0
