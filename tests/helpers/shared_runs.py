"""Runs that tests of several modules read, trained once for the whole tier: the two sessions of `scripts/test.sh`
(PRIMUS_TEST_SHARE, helpers/module_share.py) find them in their shared folder, a lone session in its own temporary
folder. The first session to ask trains the run while the other waits on its lock, then reads the same run dir."""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.overrides import LLAMA4_TINY, SHORT_RUN

# backend=torch's Llama 4 at toy size, 5 steps on one micro-batch per step (the expert bias moves once per step),
# without weight decay (torchtitan's decays every weight), evaluated after step 5: the curve backend=megatron's and
# backend=torchtitan's Llama 4 runs follow
LLAMA4_NATIVE = ["backend=torch", *SHORT_RUN, "module.eval_interval=5", "module.eval_iters=2", *LLAMA4_TINY,
                 "module.micro_batch_size=8", "module.weight_decay=0"]
RUNS = {"llama4_native": LLAMA4_NATIVE}


def shared_run(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run dir of RUNS[name], trained by whichever session asks first."""
    share = os.environ.get("PRIMUS_TEST_SHARE", "")
    root = Path(share) / "shared_runs" if share else tmp_path_factory.getbasetemp() / "shared_runs"
    root.mkdir(parents=True, exist_ok=True)
    run_dir, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while the run trains: the other session waits here for it
        if not done.exists():
            shutil.rmtree(run_dir, ignore_errors=True)  # what a failed attempt of the other session left
            result = primus(f"hydra.run.dir={run_dir}", *RUNS[name], cwd=root)
            assert result.returncode == 0, result.stderr[-3000:]
            done.touch()
    return run_dir
