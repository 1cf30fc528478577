"""Benchmark: the default `task=benchmark task.suite=gemm` on this machine, command to exit, against a bare loop of
the same products.

Goal: the default suite finishes in about a minute on any device (a CPU without fp16 kernels once took more than 10
minutes). The baseline is a plain torch script that draws the operands and runs warmup + iters products of every
case the suite measured (read back from its benchmark.json), so the ratio is what the suite adds: start-up, the
fast-kernel probe, the untimed estimating pass, the table and the plot.
Usage: .venv/bin/python scripts/bench/bench_benchmark_suite.py [--rounds 1]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE_LOOP = """
import json, sys, torch
dtypes = {"torch.float32": torch.float32, "torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16}
for m, n, k, dtype, repetitions in json.loads(sys.argv[1]):
    a, b = torch.randn(m, k, dtype=dtypes[dtype]), torch.randn(k, n, dtype=dtypes[dtype])
    for _ in range(repetitions):
        a @ b
"""


def wall_time(command: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, result.stdout + result.stderr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(rounds):
            run_dir = Path(folder) / f"run{round_}"
            suite, output = wall_time([sys.executable, "-m", "primus_hydra", "task=benchmark", "task.suite=gemm",
                                       f"hydra.run.dir={run_dir}"], Path(folder))
            records = json.loads((run_dir / "benchmark.json").read_text())["results"]
            cases = [[r["m"], r["n"], r["k"], r["dtype"], 13] for r in records]  # task.warmup 3 + task.iters 10
            bare, _ = wall_time([sys.executable, "-c", BARE_LOOP, json.dumps(cases)], Path(folder))
            estimate = re.search(r"benchmark gemm: \d+ cases x \d+ repetitions .*, about (.*)", output)
            skipped = re.findall(r"benchmark gemm: (\w+) skipped", output)
            print(f"| round {round_ + 1} | suite {suite:.1f} s | bare loop {bare:.1f} s | ratio {suite / bare:.2f} | "
                  f"estimate printed: {estimate.group(1) if estimate else '-'} | dtypes skipped: "
                  f"{', '.join(skipped) or 'none'} | {len(records)} records |")


if __name__ == "__main__":
    main()
