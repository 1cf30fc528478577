"""Benchmark: tokens/s of backend=megatron (core trainer) through `python -m primus_hydra` vs the same megatron.core
loop run by a bare `torchrun` script (bare_megatron_loop.py), and vs backend=torch, in the same run.

Same model (llama_tiny), batch (global 8 x 256 tokens, micro 4), 2 processes (dp=2) on the CPU, distributed
optimizer; the median step time after the first WARMUP steps. Goal: primus_hydra backend=megatron >= 0.98x the bare
loop. Rounds alternate between the three to spread machine noise.
Usage: .venv/bin/python scripts/bench/bench_megatron.py [--steps 30] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BATCH, MICRO, SEQ, WARMUP = 8, 4, 256, 5


def primus_tokens_per_s(backend: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        command = [sys.executable, "-m", "primus_hydra", f"backend={backend}", "model=llama_tiny",
                   "launch.nproc_per_node=2", f"module.train_iters={steps}", "module.warmup_iters=1",
                   f"module.micro_batch_size={MICRO}", f"module.global_batch_size={BATCH}", f"module.seq_length={SEQ}",
                   "module.data.source=mock", "module.checkpoint.interval=0", "module.checkpoint.save_final=false",
                   "module.log.plot=false", "module.log.progress_bar=false", f"hydra.run.dir={run_dir}"]
        subprocess.run(command, check=True, capture_output=True, cwd=tmp)
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return BATCH * SEQ / statistics.median(r["step_time_s"] for r in records[WARMUP:])


def bare_tokens_per_s(steps: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # what the orchestrator gives each of 2 workers on 2 cores
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                             str(HERE / "bare_megatron_loop.py"), str(steps)], check=True, capture_output=True,
                            text=True, env=env, cwd=ROOT)
    times = json.loads(result.stdout.strip().splitlines()[-1])["step_times"]
    return BATCH * SEQ / statistics.median(times[WARMUP:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"bare": [], "megatron": [], "torch": []}
    for round_index in range(args.rounds):
        results["bare"].append(bare_tokens_per_s(args.steps))
        results["megatron"].append(primus_tokens_per_s("megatron", args.steps))
        results["torch"].append(primus_tokens_per_s("torch", args.steps))
        print(f"round {round_index + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} tok/s" for k, v in results.items()),
              file=sys.stderr)
    median = {k: statistics.median(v) for k, v in results.items()}
    ratio = median["megatron"] / median["bare"]
    print(f"| loop (2 processes, dp=2, CPU) | median tokens/s ({args.rounds} rounds x {args.steps} steps) |")
    print("|---|---|")
    print(f"| bare torchrun + megatron.core loop | {median['bare']:,.0f} |")
    print(f"| python -m primus_hydra backend=megatron | {median['megatron']:,.0f} |")
    print(f"| python -m primus_hydra backend=torch | {median['torch']:,.0f} |")
    print(f"\nratio backend=megatron / bare loop: {ratio:.3f} (goal >= 0.98) -> {'MET' if ratio >= 0.98 else 'MISSED'}")
    print(f"ratio backend=megatron / backend=torch: {median['megatron'] / median['torch']:.3f}")


if __name__ == "__main__":
    main()
