"""task=plan and task=projection answered from the job's config alone (tasks/query.py): what they print, their
errors and exit codes are those of Hydra's run; every command line Hydra's run could answer otherwise takes it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.compose import REPO
from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition
from primus_hydra.tasks.query import answered_query

fast_composition.install()
register_schemas()
FAKE_8_GPU_NODE = {"PRIMUS_AUTO_NUM_GPUS": "8", "PRIMUS_AUTO_FREE_VRAM_GB": "80", "PRIMUS_AUTO_PER_JOB_GB": "4",
                   "PRIMUS_AUTO_VCPUS": "176", "PRIMUS_AUTO_RAM_GB": "2000"}
# the Hydra path: an override of Hydra's own config that changes nothing a query prints
THROUGH_HYDRA = "hydra.verbose=false"


def through_hydras_run(cwd, args: list[str]) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    env.update(FAKE_8_GPU_NODE, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, "-m", "primus_hydra", *args, THROUGH_HYDRA], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def answered_here(args: list[str], capsys, monkeypatch) -> tuple[bool, int, str, str]:
    for key, value in FAKE_8_GPU_NODE.items():
        monkeypatch.setenv(key, value)
    code = 0
    try:
        answered = answered_query(args)
    except SystemExit as stop:
        answered, code = True, stop.code
    out, err = capsys.readouterr()
    return answered, code, out, err


@pytest.mark.parametrize("args", [
    ["task=plan"],
    ["task=plan", "launch.nproc_per_node=auto", "backend=megatron", "model=llama3_8b", "module.micro_batch_size=1"],
    ["task=projection", "hardware=mi300x"],  # a hardware entry's numbers: hardware=auto measures this CPU each time
    ["task=projection", "backend=megatron", "model=llama3_8b", "hardware=mi300x", "launch.nnodes=2",
     "launch.nproc_per_node=8", "module.parallel.tp=2", "module.micro_batch_size=1"],
    ["task=projection", "hardware=h100", "task.search=true", "task.top=3"],
], ids=["plan", "plan megatron", "projection", "projection megatron 16 GPUs", "projection search"])
def test_a_query_prints_what_hydras_run_prints(args, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    answered, code, out, err = answered_here(args, capsys, monkeypatch)
    hydras = through_hydras_run(tmp_path, args)
    assert answered and code == 0 == hydras.returncode, hydras.stderr[-2000:]
    assert json.loads(out) == json.loads(hydras.stdout)
    assert err == hydras.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["task=plan", "module.lr=-1"],
    ["task=plan", "backend=megatron", "module.parallel.tp=3"],
    ["task=projection", "hardware=mi300x", "task.top=0"],
    ["task=projection", "hardware=mi300x", "platform.peak_tflops_per_device=${oc.env:NOT_SET_ANYWHERE}"],
], ids=["bad value", "layout", "projection's own check", "interpolation"])
def test_a_refused_query_says_what_hydras_run_says(args, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    answered, code, out, err = answered_here(args, capsys, monkeypatch)
    hydras = through_hydras_run(tmp_path, args)
    assert answered and code == 2 == hydras.returncode
    assert (out, err) == (hydras.stdout, hydras.stderr) and err.startswith("error: ")
    assert list(tmp_path.iterdir()) == []


def test_a_query_an_experiment_changes_hydras_run_for_takes_hydras_path(tmp_path, capsys, monkeypatch):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "with_env.yaml").write_text(
        "# @package _global_\nhydra:\n  job:\n    env_set:\n      PRIMUS_QUERY_TEST: '1'\n")
    (tmp_path / "experiment" / "own_launcher.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /hydra/launcher: basic\n")
    search_path = f"hydra.searchpath=[file://{tmp_path}]"
    for experiment in ("with_env", "own_launcher"):
        assert answered_here(["task=plan", f"experiment={experiment}", search_path], capsys, monkeypatch) == \
            (False, 0, "", "")
    assert answered_here(["task=plan", "experiment=with_env"], capsys, monkeypatch)[0] is False  # Hydra's error


@pytest.mark.parametrize("args", [
    ["task=train"], ["task.dry_run=true"], ["task=plan", "-m"], ["task=plan", "--cfg", "job"],
    ["task=plan", "hydra.job.name=other"], ["task=projection", "task.calibrate=true"], ["task=plan", "model=nope"],
    ["task=plan", "module.lr=[1,2"], ["task=plan", "module.checkpoint.dir=${hydra:runtime.output_dir}/checkpoints"],
])
def test_every_other_command_line_takes_hydras_path(args, capsys, monkeypatch):
    assert answered_here(args, capsys, monkeypatch) == (False, 0, "", "")
