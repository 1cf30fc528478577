"""A plain command line runs on the config config/run_composition.py composes (tasks/single_run.py): what it prints,
the run dir it leaves (.hydra/, the log, the job's files), its errors and exit codes are those of Hydra's own path,
taken here with `-cn config` (a flag that changes nothing else)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.compose import KEPT_NODES_REASON, REPO, kept_nodes_fit_this_installation

# the Hydra path: a flag that names the config the command line composes anyway
THROUGH_HYDRA = ["-cn", "config"]
# the single-run path, which refuses to fall back: a command line it leaves to Hydra fails
ONLY_SINGLE_RUN = """import sys
import primus_hydra.cli as cli
hydras_path = cli._hydra_main
def refuse():
    sys.exit("Hydra's own path was taken")
refuse.__wrapped__ = hydras_path.__wrapped__
cli._hydra_main = refuse
sys.argv[0] = "primus-hydra"
cli.main()
"""
MACHINE = {"PRIMUS_AUTO_VCPUS": "2", "PRIMUS_AUTO_RAM_GB": "16"}  # what the resource plan reads: the same each run
pytestmark = pytest.mark.skipif(not kept_nodes_fit_this_installation(), reason=KEPT_NODES_REASON)
TIMESTAMP = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}")


def run(cwd: Path, args: list[str], through_hydra: bool) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    env.update(PYTHONPATH=str(REPO / "src"), **MACHINE)
    command = [sys.executable, "-m", "primus_hydra", *args, *THROUGH_HYDRA] if through_hydra else \
        [sys.executable, "-c", ONLY_SINGLE_RUN, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def normalized(text: str, run_dir: Path) -> str:
    text = TIMESTAMP.sub("<time>", text.replace(str(run_dir), "<run_dir>"))
    text = re.sub(r"by: \S+:\d+", "by: <host>:<pid>", text)
    return re.sub(r'"pid": \d+', '"pid": <pid>', text)


def run_dir_files(run_dir: Path) -> dict[str, str]:
    files = {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_file():
            text = normalized(path.read_text(errors="replace"), run_dir)
            if path.name == "hydra.yaml":  # the command line Hydra recorded has the flag's config name too
                text = text.replace("- -cn\n", "").replace("- config\n", "")
            files[path.relative_to(run_dir).as_posix()] = text
    return files


@pytest.mark.parametrize("args", [
    ["task.dry_run=true"],
    ["task.dry_run=true", "backend=megatron", "model=llama3_8b", "module.parallel.tp=1"],
    ["task.dry_run=true", "platform=slurm"],  # the primus_slurm launcher's node (a dry run never submits)
    ["task.dry_run=true", "hydra.job.chdir=true", "+hydra.job.env_set.PRIMUS_SINGLE_RUN_TEST=1",
     "hydra.job.config.override_dirname.exclude_keys=[task.dry_run]"],
], ids=["dry run", "megatron", "slurm platform", "Hydra's values"])
def test_a_run_leaves_what_hydras_path_leaves(args, tmp_path):
    mine, hydras = tmp_path / "mine", tmp_path / "hydras"
    ran = run(tmp_path, [*args, f"hydra.run.dir={mine}"], through_hydra=False)
    ran_by_hydra = run(tmp_path, [*args, f"hydra.run.dir={hydras}"], through_hydra=True)
    assert ran.returncode == 0 == ran_by_hydra.returncode, ran.stderr[-3000:] + ran_by_hydra.stderr[-3000:]
    assert normalized(ran.stdout, mine) == normalized(ran_by_hydra.stdout, hydras)
    assert normalized(ran.stderr, mine) == normalized(ran_by_hydra.stderr, hydras)
    mine_files, hydras_files = run_dir_files(mine), run_dir_files(hydras)
    assert sorted(mine_files) == sorted(hydras_files)
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "primus.log"} <= set(mine_files)
    for name in mine_files:
        if name != ".primus/job_config.yaml":  # it records the config's digest, which has the run dir in it
            assert mine_files[name] == hydras_files[name], name


def test_a_training_run_trains_as_through_hydra(tmp_path):
    args = ["module.train_iters=3", "module.log.interval=1"]
    mine, hydras = tmp_path / "mine", tmp_path / "hydras"
    ran = run(tmp_path, [*args, f"hydra.run.dir={mine}"], through_hydra=False)
    ran_by_hydra = run(tmp_path, [*args, f"hydra.run.dir={hydras}"], through_hydra=True)
    assert ran.returncode == 0 == ran_by_hydra.returncode, ran.stderr[-3000:]
    assert (mine / "metrics.jsonl").read_text() != ""
    for name in (".hydra/config.yaml", ".hydra/overrides.yaml"):
        assert normalized((mine / name).read_text(), mine) == normalized((hydras / name).read_text(), hydras)


@pytest.mark.parametrize("args", [
    ["module.lr=-1"],  # a rule the prepare callback checks
    ["task.dry_run=true", "backend=megatron", "module.parallel.tp=3"],
])
def test_a_refused_run_says_what_hydras_path_says(args, tmp_path):
    ran = run(tmp_path, [*args, f"hydra.run.dir={tmp_path / 'mine'}"], through_hydra=False)
    ran_by_hydra = run(tmp_path, [*args, f"hydra.run.dir={tmp_path / 'mine'}"], through_hydra=True)
    assert ran.returncode == 2 == ran_by_hydra.returncode
    assert (ran.stdout, ran.stderr) == (ran_by_hydra.stdout, ran_by_hydra.stderr)
    assert ran.stderr.startswith("error: ")
    assert not (tmp_path / "mine").exists()


@pytest.mark.parametrize("args", [
    ["hydra/job_logging=none", "task.dry_run=true"],  # a group of Hydra's: composed again
    ["task.dry_run=true", "hydra.verbose=true"],  # Hydra's debug report
    ["model=no_such_model"],  # Hydra words the error
])
def test_what_only_hydra_can_run_takes_hydras_path(args, tmp_path):
    ran = run(tmp_path, [*args, f"hydra.run.dir={tmp_path / 'mine'}"], through_hydra=False)
    assert ran.returncode != 0 and "Hydra's own path was taken" in ran.stderr


def test_a_dry_run_and_compose_import_no_torch_and_compose_writes_nothing(tmp_path):
    from helpers.cli import primus_reporting_torch

    result, torch_imported = primus_reporting_torch("task.dry_run=true", "backend=megatron", "model=llama3_8b",
                                                    f"hydra.run.dir={tmp_path / 'dry'}", cwd=tmp_path)
    assert result.returncode == 0 and not torch_imported, result.stderr[-2000:]
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("XDG_CACHE_HOME", "HYDRA_FULL_ERROR")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONPATH=str(REPO / "src"))
    composed = subprocess.run(
        [sys.executable, "-c", "import sys, primus_hydra\n"
                               "from primus_hydra.config.run_composition import OWN_CONF_MODULE, compose_run_config\n"
                               "cfg = primus_hydra.compose(['backend=megatron', 'model=llama3_8b'])\n"
                               "assert compose_run_config(OWN_CONF_MODULE, 'config', [], job_name='primus') is not None\n"
                               "print(cfg.backend.name, 'torch' in sys.modules)"],
        capture_output=True, text=True, cwd=home, env=env, timeout=120)
    assert composed.stdout.split() == ["megatron", "False"], composed.stderr[-2000:]
    assert list(home.iterdir()) == []  # no cache, no run dir: composing has no side effects
