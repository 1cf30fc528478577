"""Benchmark: command -> first training step logged, nproc_per_node=2 on the tiny model, vs `torchrun
--nproc_per_node 2` of a bare script that builds the same model and runs one DDP step. Same run, interleaved.

Goal: primus_hydra <= 1.10x the bare torchrun script.
Usage: .venv/bin/python scripts/bench/bench_launch_first_step.py [--repeats 5]
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
PRIMUS = [sys.executable, "-m", "primus_hydra", "launch.nproc_per_node=2", "module.train_iters=1", "module.warmup_iters=0",
          "module.data.source=mock", "module.global_batch_size=16", "module.checkpoint.save_final=false"]
BARE = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(HERE / "bare_torchrun_step.py")]


def seconds_to_first_step(command: list[str], workdir: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PRIMUS_OUTPUT_ROOT"] = workdir
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=workdir)
    elapsed = None
    for line in process.stdout:
        if elapsed is None and "step 1/" in line:
            elapsed = time.perf_counter() - started
    process.wait(timeout=300)
    if process.returncode != 0 or elapsed is None:
        raise RuntimeError(f"{command[:4]} failed with exit code {process.returncode}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    primus, bare = [], []
    with tempfile.TemporaryDirectory() as workdir:
        seconds_to_first_step(BARE, workdir)  # warm caches
        for index in range(repeats):
            pair = [(primus, PRIMUS), (bare, BARE)]
            for results, command in pair if index % 2 == 0 else pair[::-1]:
                results.append(seconds_to_first_step(command, workdir))
            print(f"round {index + 1}: primus_hydra {primus[-1]:.2f} s, bare torchrun {bare[-1]:.2f} s", file=sys.stderr)
    ratio = statistics.median(primus) / statistics.median(bare)
    print(f"| command (2 processes, gloo, llama_tiny) | median s to first step ({repeats} runs) | min s |")
    print("|---|---|---|")
    print(f"| `torchrun --nproc_per_node 2 bare_torchrun_step.py` | {statistics.median(bare):.2f} | {min(bare):.2f} |")
    print(f"| `python -m primus_hydra launch.nproc_per_node=2 ...` | {statistics.median(primus):.2f} | {min(primus):.2f} |")
    print(f"\nratio: {ratio:.3f} (goal <= 1.10) -> {'MET' if ratio <= 1.10 else 'MISSED'}")


if __name__ == "__main__":
    main()
