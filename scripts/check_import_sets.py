"""The modules each command that does not train leaves in sys.modules, one sorted file per command, so that moving
an import (issue 24: lifting an import out of a function) can be checked to import nothing more: run it before and
after into two folders and diff them.

    python scripts/check_import_sets.py OUT_DIR
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.primus_tree import META, TRAINER, write_primus_tree  # noqa: E402 - the Primus checkout task=import reads

# the CLI ends with os._exit, which skips atexit: both ways out write the set (tests/helpers/cli.py does the same)
RECORDING = ("import atexit, os, runpy, sys\n"
             "def record():\n"
             "    open(os.environ['IMPORT_SET_FILE'], 'w').write('\\n'.join(sorted(sys.modules)) + '\\n')\n"
             "atexit.register(record)\n"
             "exit_now = os._exit\n"
             "os._exit = lambda code: (record(), exit_now(code))\n"
             "sys.argv = ['primus_hydra', *sys.argv[1:]]\n"
             "runpy.run_module('primus_hydra', run_name='__main__', alter_sys=True)\n")

COMPOSING = ("import atexit, os, sys\n"
             "atexit.register(lambda: open(os.environ['IMPORT_SET_FILE'], 'w')"
             ".write('\\n'.join(sorted(sys.modules)) + '\\n'))\n"
             "import primus_hydra\n"
             "primus_hydra.compose([])\n")

COMMANDS = {
    "cfg_job": ["--cfg", "job"],
    "cfg_job_megatron": ["backend=megatron", "model=llama3_8b", "--cfg", "job"],
    "dry_run": ["task.dry_run=true", "hydra.run.dir={run_dir}"],
    "dry_run_megatron": ["backend=megatron", "task.dry_run=true", "hydra.run.dir={run_dir}"],
    "dry_run_torchtitan": ["backend=torchtitan", "task.dry_run=true", "hydra.run.dir={run_dir}"],
    "plan": ["task=plan"],
    "plan_sweep": ["-m", "task=plan", "module.lr=1e-4,2e-4", "hydra.sweep.dir={run_dir}"],
    "projection": ["task=projection"],
    "status": ["task=status", "task.runs={cwd}"],
    "import": ["task=import", "task.source={cwd}/experiment.yaml", "task.primus_root={cwd}/primus", "task.out={cwd}/out"],
    "help": ["--help"],
}


def write_primus_experiment(cwd: Path) -> None:
    write_primus_tree(cwd / "primus")
    (cwd / "experiment.yaml").write_text(META + TRAINER)


def record(name: str, script: str, args: list[str], out: Path) -> None:
    with tempfile.TemporaryDirectory() as cwd:
        write_primus_experiment(Path(cwd))
        args = [arg.format(run_dir=Path(cwd) / "run", cwd=cwd) for arg in args]
        env = {**os.environ, "IMPORT_SET_FILE": str(out / f"{name}.txt")}
        result = subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True,
                                text=True, timeout=240)
    failed = f" ({result.stderr.strip().splitlines()[-1]})" if result.returncode else ""
    print(f"{name}: exit {result.returncode}{failed}, {len((out / f'{name}.txt').read_text().split())} modules")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, args in COMMANDS.items():
        record(name, RECORDING, args, out)
    record("compose", COMPOSING, [], out)


if __name__ == "__main__":
    main()
