"""Benchmark: `--cfg job` for backend=megatron model=llama3_8b vs `python -c "import hydra"`, in one run.

Goal: printing the composed config costs <= 0.10 s above importing hydra, and never imports torch.
Usage: .venv/bin/python scripts/bench/bench_cfg_print.py [--repeats 15]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PRINT_CONFIG = [sys.executable, "-m", "primus_hydra", "backend=megatron", "model=llama3_8b", "--cfg", "job"]
IMPORT_HYDRA = [sys.executable, "-c", "import hydra"]


def wall_time(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def import_profile() -> tuple[bool, list[tuple[int, str]]]:
    result = subprocess.run([sys.executable, "-X", "importtime", *PRINT_CONFIG[1:]], capture_output=True, text=True, check=True)
    rows = []
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = (part.strip() for part in line.split("|"))
            if not name.startswith(" "):
                rows.append((int(cumulative), name))
    modules = {name.strip() for _, name in rows} | {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    return "torch" in modules, sorted(rows, reverse=True)[:8]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    repeats = parser.parse_args().repeats
    for command in (PRINT_CONFIG, IMPORT_HYDRA):  # warm the page cache and .pyc files
        wall_time(command)
    printing, importing = [], []
    for _ in range(repeats):  # interleaved, so that machine noise hits both alike
        printing.append(wall_time(PRINT_CONFIG))
        importing.append(wall_time(IMPORT_HYDRA))
    torch_imported, top = import_profile()
    p, i = statistics.median(printing), statistics.median(importing)
    print(f"| command | median wall (s), {repeats} runs | min (s) |")
    print("|---|---|---|")
    print(f"| `python -c \"import hydra\"` | {i:.3f} | {min(importing):.3f} |")
    print(f"| `python -m primus_hydra backend=megatron model=llama3_8b --cfg job` | {p:.3f} | {min(printing):.3f} |")
    print(f"\noverhead above importing hydra: {p - i:.3f} s (goal <= 0.100 s) -> {'MET' if p - i <= 0.10 else 'MISSED'}")
    print(f"torch imported while printing: {torch_imported}")
    print("\nlargest top-level imports (-X importtime, cumulative us):")
    for cumulative, name in top:
        print(f"  {cumulative:>8}  {name}")


if __name__ == "__main__":
    main()
