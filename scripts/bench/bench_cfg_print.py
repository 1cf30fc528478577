"""Benchmark: what a user waits for before anything happens, for every command that does not train, against
`python -c "import hydra"` measured in the same run.

Each command runs as a user meets it: a fresh process, the whole wall clock, in a scratch folder outside the
checkout, through `python -m primus_hydra` and through the installed `primus-hydra` entry point. Every run of a
command has its own `import hydra` run right beside it (before it in one round, after it in the next), so that a busy
spell of the shared machine hits both; a command's margin is the median over rounds of its run minus its neighbour's.
Goals (issue 30): each within 0.10 s of `import hydra`, `--help` within 0.30 s; no command imports torch. A bare
`@hydra.main` app with no config, printing its config and running a job that does nothing, is measured in the same
rounds: the floor any Hydra application stands on here.

Usage: .venv/bin/python scripts/bench/bench_cfg_print.py [--repeats 9] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = sys.executable
ENTRY_POINT = str(Path(sys.executable).with_name("primus-hydra"))
BASELINE = ("import hydra", [PYTHON, "-c", "import hydra"], None)
GOAL_S, HELP_GOAL_S = 0.10, 0.30
COMMANDS = [
    ("--cfg job", ["--cfg", "job"], GOAL_S),
    ("backend=megatron model=llama3_8b --cfg job", ["backend=megatron", "model=llama3_8b", "--cfg", "job"], GOAL_S),
    ("task.dry_run=true", ["task.dry_run=true", "hydra.run.dir=dry_run"], GOAL_S),
    ("task=plan", ["task=plan"], GOAL_S),
    ("task=projection", ["task=projection"], GOAL_S),
    ("--help", ["--help"], HELP_GOAL_S),
]
COMPOSE = ("primus_hydra.compose([])", [PYTHON, "-c", "import primus_hydra; primus_hydra.compose([])"], GOAL_S)
# the floor: a bare @hydra.main app (no config) printing its config, and running a job that does nothing
BARE_APP = """import hydra
@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg):
    pass
main()
"""
BARE = [("bare Hydra app --cfg job", ["--cfg", "job"]),
        ("bare Hydra app, a run", ["hydra.run.dir=bare_run", "hydra/job_logging=none", "hydra/hydra_logging=none"])]


# as a user's shell has it: Python caches compiled modules (this machine's environment sets PYTHONDONTWRITEBYTECODE,
# which makes every process compile this project's ~130 modules again, ~35 ms)
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def wall_and_cpu_time(argv: list[str], cwd: str) -> tuple[float, float]:
    """The command's wall clock and its CPU time (user + system, its children included): on a shared machine the CPU
    time moves less with what else runs."""
    shutil.rmtree(Path(cwd) / "dry_run", ignore_errors=True)
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=ENV)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, argv)
    return wall, usage.ru_utime + usage.ru_stime


def imports_torch(argv: list[str], cwd: str) -> bool:
    shutil.rmtree(Path(cwd) / "dry_run", ignore_errors=True)
    result = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, cwd=cwd, env=ENV)
    return any(line.rstrip().endswith((" torch", "| torch")) for line in result.stderr.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cwd = tempfile.mkdtemp(prefix="bench_cfg_print_")
    app = Path(cwd) / "bare_app.py"
    app.write_text(BARE_APP)
    env_cmds = [BASELINE, *((label, [PYTHON, str(app), *extra], None) for label, extra in BARE), COMPOSE]
    for label, extra, goal in COMMANDS:
        env_cmds.append((f"python -m primus_hydra {label}", [PYTHON, "-m", "primus_hydra", *extra], goal))
        if os.path.exists(ENTRY_POINT):
            env_cmds.append((f"primus-hydra {label}", [ENTRY_POINT, *extra], goal))
    for _, argv, _ in env_cmds:  # warm the page cache and .pyc files
        wall_and_cpu_time(argv, cwd)
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in env_cmds}
    margins: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in env_cmds[1:]}
    for round_index in range(args.repeats):
        for label, argv, _ in env_cmds[1:]:
            pair = [(BASELINE[0], BASELINE[1]), (label, argv)]
            if round_index % 2:
                pair.reverse()
            measured = {name: wall_and_cpu_time(command, cwd) for name, command in pair}
            runs[BASELINE[0]].append(measured[BASELINE[0]])
            runs[label].append(measured[label])
            margins[label].append(tuple(ours - base for ours, base in zip(measured[label], measured[BASELINE[0]])))
    base_wall = statistics.median(wall for wall, _ in runs[BASELINE[0]])
    base_cpu = statistics.median(cpu for _, cpu in runs[BASELINE[0]])
    rows = []
    # the margin as a share of `import hydra`: what stays comparable when the whole host runs slower or faster
    print(f"| command | median wall (s), {args.repeats} runs | over `import hydra` (s), median of pairs | share of "
          f"`import hydra` | CPU s over `import hydra` | goal (wall) | torch imported |")
    print("|---|---|---|---|---|---|---|")
    print(f"| `{BASELINE[0]}` | {base_wall:.3f} | - | - | {base_cpu:.3f} | - | - |")
    for label, argv, goal in env_cmds[1:]:
        median = statistics.median(wall for wall, _ in runs[label])
        over = statistics.median(wall for wall, _ in margins[label])
        cpu_over = statistics.median(cpu for _, cpu in margins[label])
        torch = "-" if goal is None else ("yes" if imports_torch(argv, cwd) else "no")
        verdict = "-" if goal is None else f"<= {goal:.2f}: {'met' if over <= goal else 'MISSED'}"
        share = over / base_wall
        rows.append({"command": label, "median_s": round(median, 3), "over_import_hydra_s": round(over, 3),
                     "share_of_import_hydra": round(share, 2), "cpu_over_import_hydra_s": round(cpu_over, 3),
                     "goal_s": goal, "met": goal is None or over <= goal, "torch": torch})
        print(f"| `{label}` | {median:.3f} | {over:+.3f} | {share:+.2f} | {cpu_over:+.3f} | {verdict} | {torch} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(cwd, ignore_errors=True)


if __name__ == "__main__":
    main()
