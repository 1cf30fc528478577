"""Benchmark: what experiment tracking costs the default run: tokens/s and the first step's time with
logger=many logger.use=[tensorboard,mlflow,wandb] (MLflow into a local SQLite store, W&B offline) against
logger=tensorboard (today's default).

Each run is a fresh `python -m primus_hydra` (the trackers' imports and W&B's service start are paid once a run, as a
user pays them); rounds alternate between the two to spread machine noise. tokens/s is the median over the steps
after the first WARMUP; the first step is metrics.jsonl's step_time_s of step 1.
Goal: <= 2 % fewer tokens/s, <= 0.3 s added to the first step.
Usage: .venv/bin/python scripts/bench/bench_tracking.py [--steps 40] [--rounds 2] [--trackers mlflow,wandb]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WARMUP = 5


def tracked(trackers: str) -> list[str]:
    """The overrides that add `trackers` (mlflow, wandb or both) to tensorboard."""
    return ["logger=many", f"logger.use=[tensorboard,{trackers}]", "logger.wandb.mode=offline"]


def run(label: str, steps: int, extra: list[str], root: Path) -> dict:
    run_dir = root / f"{label}-{time.monotonic_ns()}"
    command = [sys.executable, "-m", "primus_hydra", f"hydra.run.dir={run_dir}", f"module.train_iters={steps}",
               "module.checkpoint.interval=0", "module.checkpoint.save_final=false", "module.log.progress_bar=false",
               "platform.peak_tflops_per_device=1.0", f"logger.mlflow.tracking_uri=sqlite:///{root / 'mlflow.db'}",
               *extra]
    env = {key: value for key, value in os.environ.items() if key != "PRIMUS_FAULT"}
    started = time.perf_counter()
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{label} failed:\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    tokens = records[-1]["tokens_per_s"] * records[-1]["step_time_s"]  # tokens per step
    times = [record["step_time_s"] for record in records][WARMUP:]
    warnings = [line for line in result.stderr.splitlines() if "logger" in line and "WARNING" in line]
    return {"tokens_per_s": tokens / statistics.median(times), "first_step_s": records[0]["step_time_s"],
            "wall_s": wall, "warnings": warnings}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trackers", default="mlflow,wandb", help="what is added to tensorboard: mlflow, wandb or both")
    args = parser.parse_args()
    label_tracked = args.trackers.replace(",", "+")
    results: dict[str, list[dict]] = {"tensorboard": [], label_tracked: []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(args.rounds):
            for label, extra in (("tensorboard", []), (label_tracked, tracked(args.trackers))):
                print(f"[bench_tracking] round {round_number + 1}/{args.rounds}: {label} ({args.steps} steps)",
                      file=sys.stderr, flush=True)
                results[label].append(run(label.replace("+", "_"), args.steps, extra, Path(tmp)))
    rows = {label: {key: statistics.median(r[key] for r in runs) for key in ("tokens_per_s", "first_step_s", "wall_s")}
            for label, runs in results.items()}
    for label, row in rows.items():
        print(f"{label:13s} tokens/s {row['tokens_per_s']:9.0f} | first step {row['first_step_s']:.3f} s | "
              f"run wall {row['wall_s']:.1f} s")
    base, with_trackers = rows["tensorboard"], rows[label_tracked]
    cost = 1 - with_trackers["tokens_per_s"] / base["tokens_per_s"]
    added = with_trackers["first_step_s"] - base["first_step_s"]
    print(f"tracking cost: {cost * 100:+.1f} % tokens/s (goal <= 2 %), first step {added:+.3f} s (goal <= 0.3 s)")
    for warning in {w for runs in results.values() for r in runs for w in r["warnings"]}:
        print(f"warning seen: {warning}")


if __name__ == "__main__":
    main()
