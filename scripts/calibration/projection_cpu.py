"""Projected vs measured on this CPU: task=projection task.calibrate=true over the native backend's layouts.

Each case runs the real CLI (a few real steps, each rank's peak memory from the torch profiler's allocation events,
tokens/s the median of the timed steps) and prints projected next to measured; --json writes the table, --png a
plot of projected against measured tokens/s. docs/projection.md ("Calibration") quotes its output. --check exits 1
when a case misses (tokens/s by more than 25 %, a rank's peak memory by more than 15 %): the projection's accuracy
is checked here, on a quiet machine, not in the test suite, whose host's speed moves between two measurements.
Usage: .venv/bin/python scripts/calibration/projection_cpu.py [--steps 8] [--json out.json] [--png out.png] [--check]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASES = {
    "llama_tiny mb1": ["module.micro_batch_size=1", "module.global_batch_size=1"],
    "llama_tiny mb2": ["module.micro_batch_size=2", "module.global_batch_size=2"],
    "llama_tiny mb4": ["module.micro_batch_size=4", "module.global_batch_size=4"],
    "llama_tiny mb8": ["module.micro_batch_size=8", "module.global_batch_size=8"],
    "llama_tiny mb16": ["module.micro_batch_size=16", "module.global_batch_size=16"],
    "llama_tiny mb4 ga2": ["module.micro_batch_size=4", "module.global_batch_size=8"],
    "llama_tiny dp2 mb4": ["launch.nproc_per_node=2", "module.micro_batch_size=4", "module.global_batch_size=8"],
    "llama_tiny dp2 mb8": ["launch.nproc_per_node=2", "module.micro_batch_size=8", "module.global_batch_size=16"],
    "llama_tiny fsdp2 mb4": ["launch.nproc_per_node=2", "module.parallel.fsdp=true", "module.micro_batch_size=4",
                             "module.global_batch_size=8"],
    "llama_tiny fsdp2 mb8": ["launch.nproc_per_node=2", "module.parallel.fsdp=true", "module.micro_batch_size=8",
                             "module.global_batch_size=16"],
    "llama_tiny tp2 mb4": ["launch.nproc_per_node=2", "module.parallel.tp=2", "module.micro_batch_size=4",
                           "module.global_batch_size=4"],
    "llama_tiny tp2 mb8": ["launch.nproc_per_node=2", "module.parallel.tp=2"],
    "moe_tiny mb2": ["model=moe_tiny", "module.micro_batch_size=2", "module.global_batch_size=2"],
    "moe_tiny mb8": ["model=moe_tiny"],
    "moe_tiny dp2 mb8": ["model=moe_tiny", "launch.nproc_per_node=2", "module.global_batch_size=16"],
    "moe_tiny fsdp2 mb4": ["model=moe_tiny", "launch.nproc_per_node=2", "module.parallel.fsdp=true",
                           "module.micro_batch_size=4", "module.global_batch_size=8"],
}
TOLERANCE = {"tokens_per_s": 0.25, "peak_memory_gib": 0.15}


def run_case(overrides: list[str], steps: int) -> dict:
    command = [sys.executable, "-m", "primus_hydra", "task=projection", "hardware=cpu", "task.calibrate=true",
               f"task.calibrate_steps={steps}", *overrides]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode:
        raise SystemExit(f"{' '.join(overrides)}: exit {result.returncode}\n{result.stderr[-2000:]}")
    data = json.loads(result.stdout)
    calibration = data["calibration"]
    return {"tokens_per_s": calibration["tokens_per_s"], "peak_memory_gib": calibration["peak_memory_gib"],
            "hardware": data["hardware"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--only", nargs="*", help="case names (default: all)")
    parser.add_argument("--json")
    parser.add_argument("--png")
    parser.add_argument("--check", action="store_true", help="exit 1 when a case misses its tolerance")
    args = parser.parse_args()
    rows = {}
    names = args.only or list(CASES)
    for index, name in enumerate(names, 1):
        rows[name] = run_case(CASES[name], args.steps)
        tokens, memory = rows[name]["tokens_per_s"], rows[name]["peak_memory_gib"]
        print(f"[{index}/{len(names)}] {name:<22} tokens/s projected {tokens['projected']:>8,.0f} measured "
              f"{tokens['measured']:>8,.0f} ({100 * tokens['error']:+5.1f} %)   peak MiB projected "
              f"{memory['projected'] * 1024:7.1f} measured {memory['measured'] * 1024:7.1f} "
              f"({100 * memory['error']:+5.1f} %)", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    if args.png:
        plot(rows, args.png)
    misses = [(name, key, row[key]["error"]) for name, row in rows.items() for key, limit in TOLERANCE.items()
              if abs(row[key]["error"]) > limit]
    print(f"{len(rows) - len({name for name, _, _ in misses})} of {len(rows)} cases within tolerance "
          f"(tokens/s 25 %, peak memory 15 %)")
    for name, key, error in misses:
        print(f"  miss {name}: {key} {100 * error:+.1f} %")
    if args.check and misses:
        raise SystemExit(1)


def plot(rows: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for axis, key, unit in ((axes[0], "tokens_per_s", "tokens/s"), (axes[1], "peak_memory_gib", "peak GiB per rank")):
        measured = [row[key]["measured"] for row in rows.values()]
        projected = [row[key]["projected"] for row in rows.values()]
        axis.scatter(measured, projected)
        for name, x, y in zip(rows, measured, projected):
            axis.annotate(name, (x, y), fontsize=6)
        low, high = min(measured + projected), max(measured + projected)
        axis.plot([low, high], [low, high], "k--", linewidth=0.8)
        axis.set_xlabel(f"measured {unit}")
        axis.set_ylabel(f"projected {unit}")
        axis.set_title(f"{unit}: projected vs measured (CPU, backend=torch)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
