"""Wall time of a 4-point CPU sweep of the tiny model: hydra/launcher=primus_local vs basic vs submitit_local.

Each point trains llama_tiny with one thread (OMP_NUM_THREADS=1, backend.num_threads=1). The launchers take turns
(round robin, so that load from elsewhere spreads over all of them); each one's best and median are reported with
the ratios. Goal: primus_local >= 1.8x faster than basic on 2 cores, and no slower than submitit_local.

    .venv/bin/python scripts/bench/bench_local_sweep.py [--repeats 2] [--train-iters 20] [--json out.json]
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
LAUNCHERS = ("primus_local", "basic", "submitit_local")
POINTS = "module.lr=1e-3,3e-4,1e-4,3e-5"


def sweep_command(launcher: str, sweep_dir: Path, train_iters: int) -> list[str]:
    return [
        sys.executable, "-m", "primus_hydra", "-m", f"hydra/launcher={launcher}", "model=llama_tiny",
        f"module.train_iters={train_iters}", "module.warmup_iters=2", "module.min_lr=1e-5", "backend.num_threads=1",
        "module.log.plot=false", "module.log.tensorboard=false", "module.log.progress_bar=false",
        "module.checkpoint.save_final=false", f"hydra.sweep.dir={sweep_dir}", POINTS,
    ]


def run_once(launcher: str, workdir: Path, train_iters: int, attempt: int) -> dict:
    sweep_dir = workdir / f"{launcher}_{attempt}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    result = subprocess.run(sweep_command(launcher, sweep_dir, train_iters), cwd=REPO, env=env,
                            capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"error: the {launcher} sweep failed (exit {result.returncode}): "
                         f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}")
    return {"launcher": launcher, "attempt": attempt, "wall_s": round(wall, 2), "load_before": round(load_before, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--train-iters", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write the runs and the summary here")
    args = parser.parse_args()

    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_local_sweep_") as tmp:
        for attempt in range(args.repeats):
            for launcher in LAUNCHERS:
                run = run_once(launcher, Path(tmp), args.train_iters, attempt)
                runs.append(run)
                print(f"{launcher:<15} attempt {attempt}: {run['wall_s']:.1f} s (load before {run['load_before']})",
                      flush=True)
    summary = {}
    for launcher in LAUNCHERS:
        times = [run["wall_s"] for run in runs if run["launcher"] == launcher]
        summary[launcher] = {"best_s": min(times), "median_s": round(statistics.median(times), 2)}
    print(f"\n{'launcher':<15} {'best':>8} {'median':>8}")
    for launcher, numbers in summary.items():
        print(f"{launcher:<15} {numbers['best_s']:>7.1f}s {numbers['median_s']:>7.1f}s")
    best = {launcher: numbers["best_s"] for launcher, numbers in summary.items()}
    ratios = {"basic / primus_local": round(best["basic"] / best["primus_local"], 2),
              "submitit_local / primus_local": round(best["submitit_local"] / best["primus_local"], 2)}
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x (best of {args.repeats})")
    print(f"cores: {len(os.sched_getaffinity(0))}, train_iters per point: {args.train_iters}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": summary, "ratios": ratios,
                                         "train_iters": args.train_iters}, indent=2) + "\n")


if __name__ == "__main__":
    main()
