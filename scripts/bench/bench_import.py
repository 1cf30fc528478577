"""Benchmark: task=import on a folder of Primus experiments vs Primus's own loader on the same files, in one run.

Baseline: Primus's PrimusParser.parse (primus/core/launcher/parser.py of the checkout, imported from it), one
experiment after another in one process, the median per file. Ours: import_files (task=import's code: read with
Primus's semantics, map, match the model, write experiment/, model/ and primus_resolved/), the whole folder from one
process, total time / files: with the checks in one process, and in as many as task=import takes by default
(task.workers=null: this machine's CPUs, at most 4). Goal (issue 29): ours per file <= 0.5x Primus's median per file
(its folder time per file, first file and slow files included as ours are, is printed beside it). Rounds
alternate; the best of each side. torchtitan's flavor tables are read once per installation and kept in the user's
cache (migrate/torchtitan_registry.py): the rounds share a cache of the benchmark's own, and the first round also
imports with an empty one (`cold`: a machine's first import).
Primus's parser creates output folders while parsing: the baseline runs in a temporary folder.
Usage: .venv/bin/python scripts/bench/bench_import.py --primus-root PATH [--rounds 3]
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

FRAMEWORKS = ("megatron", "torchtitan", "maxtext", "megatron_bridge")
BASELINE = """
import argparse, contextlib, io, json, os, sys, time
sys.path.insert(0, sys.argv[1])
from primus.core.launcher.parser import PrimusParser
times = []
for path in sys.argv[2:]:
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            PrimusParser().parse(argparse.Namespace(config=path))
    except Exception:
        continue
    times.append(time.perf_counter() - started)
print(json.dumps(times))
"""
OURS = """
import json, os, sys, time
from pathlib import Path
from primus_hydra.tasks.import_checks import import_workers
from primus_hydra.tasks.import_session import import_files
root, out, files = Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[4:]]
workers = import_workers(None if sys.argv[3] == "auto" else int(sys.argv[3]), len(files))
started = time.perf_counter()
results = import_files(files, root / "examples", root, out, dict(os.environ), workers)
print(json.dumps({"seconds": time.perf_counter() - started, "imported": sum(not r.failure for r in results),
                  "workers": workers}))
"""


def run(code: str, *args: str, cwd: str, cache: str = "") -> str:
    env = {**os.environ, "XDG_CACHE_HOME": cache} if cache else None
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, env=env)
    if result.returncode:
        raise SystemExit(f"benchmark step failed:\n{result.stderr[-3000:]}")
    return result.stdout.splitlines()[-1]


def experiment_files(root: Path) -> list[str]:
    return [str(path) for framework in FRAMEWORKS
            for path in sorted((root / "examples" / framework).rglob("*.yaml"))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--primus-root", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    files = experiment_files(args.primus_root.resolve())
    root = str(args.primus_root.resolve())
    baseline, ours, cold = [], {"1": [], "auto": []}, []
    with tempfile.TemporaryDirectory() as cache:
        for round_number in range(args.rounds):
            with tempfile.TemporaryDirectory() as cwd:
                times = json.loads(run(BASELINE, root, *files, cwd=cwd))
                baseline.append((statistics.median(times), len(times), sum(times) / len(files)))
                if round_number == 0:
                    with tempfile.TemporaryDirectory() as empty:
                        ran = json.loads(run(OURS, root, str(Path(cwd) / "cold"), "auto", *files, cwd=cwd, cache=empty))
                    cold.append(ran["seconds"] / len(files))
                for workers, runs in ours.items():
                    ran = json.loads(run(OURS, root, str(Path(cwd) / f"out{workers}"), workers, *files, cwd=cwd,
                                         cache=cache))
                    runs.append((ran["seconds"] / len(files), ran["imported"], ran["workers"]))
    primus_ms = min(b[0] for b in baseline) * 1000
    primus_whole_ms = min(b[2] for b in baseline) * 1000  # the folder's time / files, as ours is counted
    one_ms, auto_ms = (min(run[0] for run in ours[workers]) * 1000 for workers in ("1", "auto"))
    print(json.dumps({"files": len(files), "primus_parsed": baseline[0][1], "imported": ours["auto"][0][1],
                      "primus_median_ms_per_file": round(primus_ms, 2),
                      "primus_folder_ms_per_file": round(primus_whole_ms, 2),
                      "import_ms_per_file_one_process": round(one_ms, 2), "ratio_one_process": round(one_ms / primus_ms, 3),
                      "workers": ours["auto"][0][2], "import_ms_per_file": round(auto_ms, 2),
                      "ratio": round(auto_ms / primus_ms, 3),
                      "ratio_to_primus_folder": round(auto_ms / primus_whole_ms, 3), "import_ms_per_file_cold": round(cold[0] * 1000, 2),
                      "ratio_cold": round(cold[0] * 1000 / primus_ms, 3), "goal": "<= 0.5 (issue 29)"}, indent=1))


if __name__ == "__main__":
    main()
