"""Benchmark: submission -> first training step on the local Slurm cluster (2 nodes x 1 task, gloo on CPU, the
tiny model), `python -m primus_hydra platform=slurm launch.nnodes=2 ...` vs a hand-written sbatch script whose
`srun` runs a bare script doing the same DDP step (bare_torchrun_step.py). Same run, interleaved.

Both clocks start when the submitting command starts and stop when the first step's line appears in the job's
output (primus: <run_dir>/logs/rank_0.log; bare: the sbatch output file), polled every 20 ms.
Goal: primus_hydra <= 1.2x the hand-written sbatch + srun.
Usage: SLURM_CONF=... .venv/bin/python scripts/bench/bench_slurm_first_step.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRIMUS = [sys.executable, "-m", "primus_hydra", "platform=slurm", "launch.nnodes=2", "module.train_iters=1",
          "module.warmup_iters=0", "module.data.source=mock", "module.global_batch_size=16",
          "module.checkpoint.save_final=false", "module.log.tensorboard=false", "module.log.plot=false",
          "hydra.launcher.poll_interval_s=0.5"]
BARE_SBATCH = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --job-name=bare --output={out}
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 40000))
srun --kill-on-bad-exit=1 bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID exec {python} {script}'
"""


def _wait_for_line(path_of, needle: str, started: float, timeout_s: float = 300) -> float:
    while time.perf_counter() - started < timeout_s:
        path = path_of()
        if path is not None and path.is_file() and needle in path.read_text(errors="replace"):
            return time.perf_counter() - started
        time.sleep(0.02)
    raise RuntimeError(f"no {needle!r} within {timeout_s} s")


def primus_seconds(workdir: Path) -> float:
    run_dir = workdir / "run"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    started = time.perf_counter()
    process = subprocess.Popen([*PRIMUS, f"hydra.run.dir={run_dir}"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=workdir)
    elapsed = _wait_for_line(lambda: run_dir / "logs" / "rank_0.log", "step 1/", started)
    _, stderr = process.communicate(timeout=300)
    if process.returncode != 0:
        raise RuntimeError(f"primus_hydra failed: {stderr[-2000:]}")
    return elapsed


def bare_seconds(workdir: Path) -> float:
    out = workdir / "bare.out"
    script = workdir / "bare.sbatch"
    script.write_text(BARE_SBATCH.format(out=out, python=sys.executable, script=HERE / "bare_torchrun_step.py"))
    started = time.perf_counter()
    job_id = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True,
                            cwd=workdir).stdout.strip()
    elapsed = _wait_for_line(lambda: out, "step 1/1", started)
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True).stdout.strip():
        time.sleep(0.2)  # let it finish before the next measurement
    return elapsed


def wait_for_idle_nodes(timeout_s: float = 120) -> None:
    """Start every measurement on an idle cluster: a job whose nodes are still completing the previous job's
    epilogue would otherwise be charged the wait (the main source of noise in a first version of this script)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True).stdout.split()
        busy = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip()
        if states and all(state == "idle" for state in states) and not busy:
            time.sleep(0.5)
            return
        time.sleep(0.2)
    raise RuntimeError("the cluster did not become idle")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit("error: SLURM_CONF is not set; bring the local cluster up: bash scripts/local_slurm.sh up")
    results: dict[str, list[float]] = {"primus_hydra": [], "bare sbatch+srun": []}
    with tempfile.TemporaryDirectory(prefix="bench_slurm_") as tmp:
        for repeat in range(args.repeats):
            for name, measure in (("bare sbatch+srun", bare_seconds), ("primus_hydra", primus_seconds)):
                workdir = Path(tmp) / f"{name.split()[0]}_{repeat}"
                workdir.mkdir()
                wait_for_idle_nodes()
                results[name].append(measure(workdir))
                print(f"[{repeat + 1}/{args.repeats}] {name}: {results[name][-1]:.2f} s", flush=True)
    bare, primus = (statistics.median(results[k]) for k in ("bare sbatch+srun", "primus_hydra"))
    print(f"median submission -> first step: bare sbatch+srun {bare:.2f} s, primus_hydra {primus:.2f} s, "
          f"ratio {primus / bare:.3f}x (goal <= 1.2x); best: {min(results['bare sbatch+srun']):.2f} s vs "
          f"{min(results['primus_hydra']):.2f} s")


if __name__ == "__main__":
    main()
