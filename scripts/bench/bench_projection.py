"""Benchmark: task=projection -m over N layout points vs task=plan -m over the same points, in one run.

Baseline: task=plan (the resource plan: the same preparation and validation of every point, no projection).
Ours: task=projection over the same points (preparation, validation, the projection, its report). Per point =
(N-point wall - 1-point wall) / (N - 1), so the interpreter's start-up cancels. Goal: well under a second per point,
and the projection's own cost small next to the validation it shares with task=plan. Also timed: one search
(deepseek_v3 on 32 x 8 H200, every layout projected), in-process.
Usage: .venv/bin/python scripts/bench/bench_projection.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

POINT_SWEEP = ["model=llama3_8b", "hardware=h100", "launch.nproc_per_node=8", "module.global_batch_size=64",
               "module.seq_length=2048", "module.parallel.tp=1,2,4,8", "module.micro_batch_size=1,2,4", "module.lr=1e-4,2e-4",
               "launch.allow_oversubscribe=true"]  # task=plan plans for this machine, which the 8 x H100 job exceeds
ONE_POINT = ["model=llama3_8b", "hardware=h100", "launch.nproc_per_node=8", "module.global_batch_size=64",
             "module.seq_length=2048", "module.parallel.tp=2", "module.micro_batch_size=2", "module.lr=1e-4",
             "launch.allow_oversubscribe=true"]
SEARCH = ["task=projection", "model=deepseek_v3", "backend=megatron", "launch.nnodes=32", "launch.nproc_per_node=8",
          "hardware=h200", "task.search=true", "module.precision=bf16", "module.seq_length=4096",
          "module.global_batch_size=1024"]


def wall_s(task: str, overrides: list[str], tmp: str) -> float:
    command = [sys.executable, "-m", "primus_hydra", "-m", f"task={task}", *overrides]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "TMPDIR": tmp})
    return time.perf_counter() - started


def search_s() -> tuple[float, int]:
    command = [sys.executable, "-m", "primus_hydra", *SEARCH]
    started = time.perf_counter()
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, json.loads(result.stdout)["search"]["projected"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    points = 4 * 3 * 2
    per_point = {"plan": [], "projection": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for task in ("plan", "projection"):  # alternate: both see the same moment's load
                many, one = wall_s(task, POINT_SWEEP, tmp), wall_s(task, ONE_POINT, tmp)
                per_point[task].append((many - one) / (points - 1))
    plan, projection = min(per_point["plan"]), min(per_point["projection"])
    search, projected = search_s()
    print(f"{points} points, best of {args.repeats}: task=plan {plan * 1e3:.1f} ms/point, task=projection "
          f"{projection * 1e3:.1f} ms/point ({projection / plan:.2f}x)")
    print(f"search: {projected} layouts of deepseek_v3 on 256 x h200 in {search:.2f} s (whole command)")


if __name__ == "__main__":
    main()
