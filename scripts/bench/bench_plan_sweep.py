"""Benchmark: `task=plan -m` over N points, this project's sweep path vs Hydra's basic sweeper and launcher, in one run.

Ours: the primus_basic sweeper and the primus_local launcher (conf/task/plan.yaml) plan every point in one process,
from the first point's config where only values differ (launch/sweep/compose.py). Hydra's: every point composed
twice from scratch (once to check it, once to run it), each run through Hydra's run_job. Both print the same
JSON lines (tests/integration/test_task_plan.py checks it). Per point = (N-point wall - 1-point wall) / (N - 1).
Usage: .venv/bin/python scripts/bench/bench_plan_sweep.py [--points 150] [--repeats 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HYDRAS = ["hydra/sweeper=basic", "hydra/launcher=basic"]


def wall_s(points: int, extra: list[str], tmp: str) -> float:
    command = [sys.executable, "-m", "primus_hydra", "-m", "task=plan", f"module.lr=range(1,{points + 1})", *extra]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "TMPDIR": tmp})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results: dict = {"ours": ([], []), "hydra's": ([], [])}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.repeats):
            for name, extra in (("ours", []), ("hydra's", HYDRAS)):
                one, many = wall_s(1, extra, tmp), wall_s(args.points, extra, tmp)
                results[name][0].append(one)
                results[name][1].append(many)
                print(f"round {round_index + 1}: {name}: 1 point {one:.2f} s, {args.points} points {many:.2f} s",
                      file=sys.stderr)
    print(f"| sweep path | 1 point (s) | {args.points} points (s) | per point (ms) |")
    print("|---|---|---|---|")
    per_point = {}
    for name, (ones, manys) in results.items():
        one, many = statistics.median(ones), statistics.median(manys)
        per_point[name] = (many - one) / (args.points - 1) * 1000
        print(f"| {name} | {one:.2f} | {many:.2f} | {per_point[name]:.0f} |")
    ratio = per_point["ours"] / per_point["hydra's"]
    print(f"\nours / hydra's, per point: {ratio:.3f}")


if __name__ == "__main__":
    main()
