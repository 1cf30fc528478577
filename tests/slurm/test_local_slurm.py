"""The local Slurm cluster itself (scripts/local_slurm.sh): daemons, two nodes, accounting. Requeue and a failed
node are tested with real jobs in tests/slurm/test_slurm_faults.py.

Skipped without a cluster (see tests/helpers/slurm_cluster.py); scripts/test.sh brings one up as root on Linux.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers.slurm_cluster import LOCAL_SLURM, sacct_state, slurm_conf_path, squeue_job_ids, wait_until


@pytest.fixture
def slurm():
    return slurm_conf_path()


def _sbatch(tmp_path: Path, *args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", "-o", str(tmp_path / "%j.out"), *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip().split(";")[0]


def test_status_exits_0_when_up(slurm):
    home = Path(slurm).parents[1]
    if not (home / "env.sh").is_file():
        pytest.skip(f"SLURM_CONF={slurm} is not a scripts/local_slurm.sh cluster")
    out = subprocess.run(["bash", str(LOCAL_SLURM), "status"], env={**os.environ, "PRIMUS_SLURM_HOME": str(home)},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    for daemon in ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd-n1", "slurmd-n2"):
        assert f"{daemon}" in out.stdout and "stopped" not in out.stdout, out.stdout


def test_srun_spans_both_nodes(slurm):
    out = subprocess.run(["srun", "-N2", "-n2", "--time=1", "bash", "-c",
                          'echo "$SLURMD_NODENAME $SLURM_NODEID $SLURM_PROCID"; getent hosts "$SLURMD_NODENAME" >/dev/null'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split("\n")[:-1]) == ["n1 0 0", "n2 1 1"], out.stdout


def test_sacct_reports_completed_and_failed(slurm, tmp_path):
    ok = _sbatch(tmp_path, "-N2", "--wrap", "srun true")
    bad = _sbatch(tmp_path, "-N1", "--wrap", "exit 3")
    wait_until(lambda: sacct_state(ok) == "COMPLETED" and sacct_state(bad) == "FAILED", timeout_s=30)
    assert ok not in squeue_job_ids() and bad not in squeue_job_ids()


