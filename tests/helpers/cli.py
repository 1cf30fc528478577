"""Running `python -m primus_hydra` as a user would, in a subprocess, and finding what it wrote."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

# variables of the test's own shell that would change what a run does
UNSET = ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PRIMUS_FAULT")


def clean_env(extra: Optional[dict] = None) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in UNSET and not key.startswith("PRIMUS_AUTO_")}
    env.update(extra or {})
    return env


def primus(*args: str, cwd: Path, env: Optional[dict] = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m primus_hydra ARGS` in `cwd` (outputs/ and multirun/ go there unless PRIMUS_OUTPUT_ROOT says else)."""
    Path(cwd).mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "primus_hydra", *args], capture_output=True, text=True,
                          env=clean_env(env), timeout=timeout, cwd=cwd)


def run_dirs(root: Path) -> list[Path]:
    """The run dirs under root (each has Hydra's .hydra/)."""
    return sorted(p.parent for p in Path(root).glob("**/.hydra"))


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# `python -m primus_hydra` that says at exit whether torch was imported (a job refused while it is prepared never
# is): also when the CLI ends with os._exit, as a command that is done does, which skips atexit
REPORTING_TORCH = ("import atexit, os, runpy, sys\n"
                   "def report():\n"
                   "    print('TORCH_IMPORTED=%s' % ('torch' in sys.modules), file=sys.stderr, flush=True)\n"
                   "atexit.register(report)\n"
                   "exit_now = os._exit\n"
                   "os._exit = lambda code: (report(), exit_now(code))\n"
                   "sys.argv = ['primus_hydra', *sys.argv[1:]]\n"
                   "runpy.run_module('primus_hydra', run_name='__main__', alter_sys=True)\n")


def primus_reporting_torch(*args: str, cwd: Path, env: Optional[dict] = None,
                           timeout: float = 240) -> tuple[subprocess.CompletedProcess, bool]:
    """`primus(...)`, and whether the process imported torch."""
    Path(cwd).mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, "-c", REPORTING_TORCH, *args], capture_output=True, text=True,
                            env=clean_env(env), timeout=timeout, cwd=cwd)
    return result, "TORCH_IMPORTED=True" in result.stderr
