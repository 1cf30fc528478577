"""One run per run dir, with real processes: the second is refused at once naming the first, nothing of the
first's is rewritten, and the OS frees the lock when its holder dies."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers.cli import clean_env, error_lines, primus
from primus_hydra.launch.run_dir_lock import LOCK_FILE, RUN_DIR_LOCKS, RunDirBusyError

HOLD = ("import sys, time\n"
        "from primus_hydra.launch.run_dir_lock import RUN_DIR_LOCKS\n"
        "RUN_DIR_LOCKS.acquire(sys.argv[1]); print('held', flush=True); time.sleep(600)\n")


@pytest.fixture
def holder(tmp_path):
    """Another process holding tmp_path/run; killed (SIGKILL) by the test or at the end."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True,
                               env=clean_env())
    assert process.stdout.readline().strip() == "held"
    yield process
    process.kill()
    process.wait()


def test_a_second_holder_is_refused_naming_the_first(tmp_path, holder):
    with pytest.raises(RunDirBusyError) as info:
        RUN_DIR_LOCKS.acquire(tmp_path / "run")
    assert str(info.value).startswith(f"run dir {tmp_path / 'run'} is in use by another run (pid {holder.pid} on "
                                      f"{socket.gethostname()}, since ")
    with pytest.raises(RunDirBusyError):
        RUN_DIR_LOCKS.check_free(tmp_path / "run")


def test_the_os_frees_the_lock_of_a_killed_holder(tmp_path, holder):
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    RUN_DIR_LOCKS.check_free(tmp_path / "run")
    with RUN_DIR_LOCKS.holding(tmp_path / "run"):
        assert RUN_DIR_LOCKS.holds(tmp_path / "run")
    assert not RUN_DIR_LOCKS.holds(tmp_path / "run") and (tmp_path / "run" / LOCK_FILE).exists()


def test_a_second_run_in_a_busy_run_dir_stops_at_once_and_rewrites_nothing(tmp_path):
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", "module.train_iters=400", "module.log.progress_bar=false",
            "module.checkpoint.interval=0", "module.checkpoint.save_final=false"]
    first = subprocess.Popen([sys.executable, "-m", "primus_hydra", *args], cwd=tmp_path, env=clean_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "metrics.jsonl").exists():  # training: the lock is held, .hydra written
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        overrides = (run_dir / ".hydra" / "overrides.yaml").read_bytes()
        started = time.monotonic()
        second = primus(f"hydra.run.dir={run_dir}", "module.lr=1e-4", cwd=tmp_path)
        assert second.returncode == 2 and time.monotonic() - started < 30, second.stderr[-2000:]
        assert error_lines(second.stderr) == [
            f"error: run dir {run_dir} is in use by another run (pid {first.pid} on {socket.gethostname()}, since "
            + error_lines(second.stderr)[0].split(", since ")[1]]
        assert (run_dir / ".hydra" / "overrides.yaml").read_bytes() == overrides
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert os.path.exists(run_dir / LOCK_FILE)
