"""Benchmark: backend=torchtitan through `python -m primus_hydra` vs torchtitan's own entry point
(bare_torchtitan_train.py: `torchtitan.train.main` under torchrun, its own loop, the same job file and patches), in
the same run.

Same model (llama_tiny), batch (global 8 x 256 tokens, micro 4), 2 processes (FSDP, dp_shard=2) on the CPU. Two
numbers: tokens/s from the wall clock between the ends of steps WARMUP..last (loop overhead included), goal >= 0.98x;
and command -> end of the first step, goal <= 1.1x. Rounds alternate between the two to spread machine noise.
Usage: .venv/bin/python scripts/bench/bench_torchtitan.py [--steps 30] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BATCH, MICRO, SEQ, WARMUP = 8, 4, 256, 5
STEP_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*\] - step (\d+)/\d+ \|")


def primus_run(steps: int) -> tuple[float, float]:
    """(tokens/s, seconds from the command to the end of step 1)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        command = [sys.executable, "-m", "primus_hydra", "backend=torchtitan", "model=llama_tiny",
                   "launch.nproc_per_node=2", "module.parallel.fsdp=true", f"module.train_iters={steps}",
                   "module.warmup_iters=1", f"module.micro_batch_size={MICRO}", f"module.global_batch_size={BATCH}",
                   f"module.seq_length={SEQ}", "module.data.source=mock", "module.checkpoint.interval=0",
                   "module.checkpoint.save_final=false", "module.log.plot=false", "module.log.progress_bar=false",
                   "module.log.interval=1", "module.log.tensorboard=false", f"hydra.run.dir={run_dir}"]
        started = time.time()
        subprocess.run(command, check=True, capture_output=True, cwd=tmp)
        ends = {}
        for line in (run_dir / "logs" / "rank_0.log").read_text().splitlines():
            match = STEP_LINE.match(line)
            if match:
                ends[int(match.group(2))] = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    times = [ends[s] for s in sorted(ends)]
    return _rate(times), times[0] - started


def bare_run(steps: int) -> tuple[float, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # what the orchestrator gives each of 2 workers on 2 cores
    with tempfile.TemporaryDirectory() as tmp:
        started = time.time()
        result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                 str(HERE / "bare_torchtitan_train.py"), tmp, str(steps)], check=True,
                                capture_output=True, text=True, env=env, cwd=ROOT)
    times = json.loads(result.stdout.strip().splitlines()[-1])["step_ends"]
    return _rate(times), times[0] - started


def _rate(step_ends: list[float]) -> float:
    steady = step_ends[WARMUP - 1:]
    return BATCH * SEQ * (len(steady) - 1) / (steady[-1] - steady[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"bare": [], "primus": []}
    for round_index in range(args.rounds):
        results["bare"].append(bare_run(args.steps))
        results["primus"].append(primus_run(args.steps))
        print(f"round {round_index + 1}: " + ", ".join(f"{k} {v[-1][0]:,.0f} tok/s, first step {v[-1][1]:.2f} s"
                                                       for k, v in results.items()), file=sys.stderr)
    rate = {k: statistics.median(r for r, _ in v) for k, v in results.items()}
    first = {k: statistics.median(f for _, f in v) for k, v in results.items()}
    print(f"| run (2 processes, FSDP, CPU; {args.rounds} rounds x {args.steps} steps) | median tokens/s | "
          f"command -> end of step 1 (s) |")
    print("|---|---|---|")
    print(f"| torchrun + torchtitan.train.main (its own loop) | {rate['bare']:,.0f} | {first['bare']:.2f} |")
    print(f"| python -m primus_hydra backend=torchtitan | {rate['primus']:,.0f} | {first['primus']:.2f} |")
    throughput, startup = rate["primus"] / rate["bare"], first["primus"] / first["bare"]
    print(f"\ntokens/s ratio: {throughput:.3f} (goal >= 0.98) -> {'MET' if throughput >= 0.98 else 'MISSED'}")
    print(f"first-step ratio: {startup:.3f} (goal <= 1.1) -> {'MET' if startup <= 1.1 else 'MISSED'}")


if __name__ == "__main__":
    main()
