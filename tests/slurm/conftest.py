"""Fixtures of the Slurm tier: every test needs the cluster (skipped without one, see helpers/slurm_cluster.py);
the local loss curve every Slurm job must reproduce."""
from __future__ import annotations

import pytest

from helpers.curves import losses
from helpers.slurm_cluster import require_slurm
from helpers.slurm_runs import FAST, primus


@pytest.fixture(autouse=True)
def _cluster():
    require_slurm()


@pytest.fixture(scope="module")
def local_curve(tmp_path_factory):
    """The same training on this machine, one process, no Slurm: the curve every Slurm job must reproduce."""
    def curve(train_iters: int, *extra: str) -> dict[int, float]:
        run_dir = tmp_path_factory.mktemp("local") / "run"
        result = primus(run_dir.parent, f"hydra.run.dir={run_dir}", f"module.train_iters={train_iters}", *FAST, *extra)
        assert result.returncode == 0, result.stderr[-3000:]
        return losses(run_dir)

    cache: dict[tuple, dict] = {}

    def cached(train_iters: int, *extra: str) -> dict[int, float]:
        if (train_iters, extra) not in cache:
            cache[(train_iters, extra)] = curve(train_iters, *extra)
        return cache[(train_iters, extra)]

    return cached
