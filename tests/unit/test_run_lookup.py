"""What task.run names for task=logs and task=cancel: a sweep dir with a point's run dir missing is one line, unless
the local sweep is still running (its points' dirs appear as they start)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from primus_hydra.errors import PrimusError
from primus_hydra.launch.run_dir_lock import LOCK_FILE
from primus_hydra.tasks.run_lookup import runs_of


def local_sweep(root, points: int):
    sweep = root / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(
        {"hydra": {"overrides": {"task": ["module.train_iters=2", f"module.seed={','.join(map(str, range(points)))}"]}}}))
    for number in range(points):
        (sweep / str(number) / ".hydra").mkdir(parents=True)
        (sweep / str(number) / ".hydra" / "config.yaml").write_text("{}\n")
    return sweep


def test_a_local_sweep_with_a_point_missing_is_one_line(tmp_path):
    sweep = local_sweep(tmp_path, 3)
    assert runs_of(str(sweep)) == [sweep / "0", sweep / "1", sweep / "2"]
    (sweep / "1" / ".hydra" / "config.yaml").unlink()
    (sweep / "1" / ".hydra").rmdir()
    with pytest.raises(PrimusError) as raised:
        runs_of(str(sweep))
    assert str(raised.value) == (f"task.run={sweep}: the sweep has 3 points but 2 of their run dirs are there; give "
                                 "one point's run dir")


def test_a_running_local_sweep_names_the_points_it_has_so_far(tmp_path):
    sweep = local_sweep(tmp_path, 2)
    (sweep / "1" / ".hydra" / "config.yaml").unlink()
    (sweep / "1" / ".hydra").rmdir()
    lock = sweep / "0" / LOCK_FILE
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", f"import fcntl, os, time\nfd = os.open({str(lock)!r}, "
                               "os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\n"
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert runs_of(str(sweep)) == [sweep / "0"]
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(PrimusError, match="the sweep has 2 points but 1 of their run dirs are there"):
        runs_of(str(sweep))
