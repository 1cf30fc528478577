"""Benchmark: tokens/s of the tiny model at dp=1, dp=2 and tp=2 (gloo, CPU), same run, same global batch.

On a 2-core machine two processes share the cores that one process uses alone, so no speed-up is expected;
the table shows what the collectives cost. Usage: .venv/bin/python scripts/bench/bench_parallel_throughput.py
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COMMON = ["module.train_iters=30", "module.warmup_iters=0", "module.data.source=mock", "module.micro_batch_size=8",
          "module.global_batch_size=16", "module.seq_length=256", "module.checkpoint.interval=0",
          "module.checkpoint.save_final=false", "module.log.plot=false", "platform.peak_tflops_per_device=1.0"]
LAYOUTS = {"dp=1 (1 process)": ["launch.nproc_per_node=1"], "dp=2": ["launch.nproc_per_node=2"],
           "tp=2": ["launch.nproc_per_node=2", "module.parallel.tp=2"], "fsdp=2": ["launch.nproc_per_node=2", "module.parallel.fsdp=true"]}
SKIP = 5  # warm-up steps


def tokens_per_s(layout: list[str], workdir: Path) -> float:
    run_dir = workdir / str(len(list(workdir.iterdir())))
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    subprocess.run([sys.executable, "-m", "primus_hydra", f"hydra.run.dir={run_dir}", *COMMON, *layout], check=True,
                   capture_output=True, env=env, cwd=workdir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][SKIP:]
    return statistics.median(r["tokens_per_s"] for r in records)


def main() -> None:
    results: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(2):
            for name, layout in LAYOUTS.items():
                results[name].append(tokens_per_s(layout, Path(tmp)))
                print(f"round {round_index + 1}: {name} {results[name][-1]:,.0f} tok/s", file=sys.stderr)
    base = statistics.median(results["dp=1 (1 process)"])
    print("| layout (global batch 16 x 256 tokens) | tokens/s (median of 2 runs x 25 steps) | vs dp=1 |")
    print("|---|---|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):,.0f} | {statistics.median(values) / base:.2f}x |")
    print(f"\n{os.cpu_count()} CPU cores; each of 2 processes gets {max(1, os.cpu_count() // 2)} thread(s)")


if __name__ == "__main__":
    main()
