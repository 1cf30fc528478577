"""The smaller defects of issue 23 (§9) as a user meets them, in real processes: a derived value's error names the
key typed on the command line; MFU against a cached peak that a step beats; a query (task=status, task=plan) leaves
no folder whatever run dir or sweep it is given; the Python API's failing job leaves nothing and prints nothing of
Hydra's; an experiment that picks primus_local sweeps into its own sweep dir."""
from __future__ import annotations

import json

import pytest

import primus_hydra
from helpers.cli import error_lines, primus, primus_reporting_torch, run_dirs
from helpers.overrides import TINY_RUN
from primus_hydra.backends.cpu_peak_cache import cache_key
from primus_hydra.errors import PatchError

TINY = TINY_RUN


def write_experiment(conf_dir, name: str, text: str) -> None:
    (conf_dir / "experiment").mkdir(parents=True, exist_ok=True)
    (conf_dir / "experiment" / f"{name}.yaml").write_text("# @package _global_\n" + text)


def everything_under(folder) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


# ---- a derived value's error names the key the user typed ----------------------------------------------------------

def test_a_negative_lr_is_one_line_naming_the_lr_exit_2_nothing_written_no_torch(tmp_path):
    result, imported_torch = primus_reporting_torch("module.lr=-1", cwd=tmp_path)

    assert (result.returncode, error_lines(result.stderr)) == (2, ["error: module.lr=-1.0: must be > 0"])
    assert "Traceback" not in result.stderr and not imported_torch
    assert list(tmp_path.iterdir()) == []


# ---- MFU is never clamped: a beaten baseline is measured again ------------------------------------------------------

@pytest.mark.slow  # trains two steps
def test_a_cached_peak_that_a_step_beats_is_measured_again_and_mfu_is_read_against_the_new_one(tmp_path):
    cache = tmp_path / "cache" / "primus_hydra" / "cpu_matmul_peak.json"
    cache.parent.mkdir(parents=True)
    low = 1e-9  # a peak no step can fall below: what a measurement on a loaded machine leaves, exaggerated
    cache.write_text(json.dumps({cache_key(threads, "torch.float32"): low for threads in range(1, 257)}))

    result = primus(*TINY, "hydra.run.dir=run", cwd=tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})

    assert result.returncode == 0, result.stderr
    measured = [value for value in json.loads(cache.read_text()).values() if value > low]
    assert len(measured) == 1  # the run's thread count, measured again and kept
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [record["mfu"] for record in records] == [record["tflops"] / measured[0] for record in records]
    assert "MFU baseline: step 1 ran" in (tmp_path / "run" / "logs" / "rank_0.log").read_text()


# ---- a query writes nothing ----------------------------------------------------------------------------------------

def test_task_status_writes_nothing_when_an_experiment_gives_a_run_dir(tmp_path):
    write_experiment(tmp_path / "conf", "mine", "hydra:\n  run:\n    dir: runs/${now:%H-%M-%S.%f}\n")
    work = tmp_path / "work"

    result = primus("--config-dir", str(tmp_path / "conf"), "experiment=mine", "task=status", cwd=work)

    assert (result.returncode, result.stdout) == (0, "no submitted runs under outputs, multirun\n"), result.stderr
    assert list(work.iterdir()) == []


def test_task_status_writes_nothing_when_the_command_line_gives_a_run_dir(tmp_path):
    result = primus("task=status", "hydra.run.dir=asked_here", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_task_status_as_a_multirun_asks_each_point_here_and_writes_nothing(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    temp = tmp_path / "temp"
    temp.mkdir()

    result = primus("-m", "task=status", "task.runs=a,b", cwd=tmp_path, env={"TMPDIR": str(temp)})

    assert result.returncode == 0, result.stderr
    assert result.stdout == ("[job 0: task=status task.runs=a]\nno submitted runs under a\n"
                             "[job 1: task=status task.runs=b]\nno submitted runs under b\n")
    assert everything_under(tmp_path) == ["a", "b", "temp"]


def test_a_multirun_status_query_of_a_missing_folder_is_refused_before_any_point_runs(tmp_path):
    (tmp_path / "a").mkdir()

    result = primus("-m", "task=status", "task.runs=a,nope", cwd=tmp_path, env={"TMPDIR": str(tmp_path)})

    assert (result.returncode, error_lines(result.stderr)) == (
        2, ["error: [job 1: task.runs=nope] task.runs=nope: no such directory; give a run or sweep dir"])
    assert result.stdout == "" and everything_under(tmp_path) == ["a"]


def test_task_plan_writes_nothing_when_an_experiment_gives_a_run_dir(tmp_path):
    write_experiment(tmp_path / "conf", "mine", "hydra:\n  run:\n    dir: runs/${now:%H-%M-%S.%f}\n")
    work = tmp_path / "work"

    result = primus("--config-dir", str(tmp_path / "conf"), "experiment=mine", "task=plan", cwd=work)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["nproc_per_node"] == 1 and list(work.iterdir()) == []


# ---- the Python API: a failing job ---------------------------------------------------------------------------------

def failing_patch_module(folder, name: str, phase: str) -> str:
    (folder / f"{name}.py").write_text(
        "from primus_hydra.errors import DataError\n"
        "from primus_hydra.patches import register_patch\n\n"
        f"@register_patch('user.fails', backend='torch', phase='{phase}')\n"
        "def fails(ctx):\n"
        "    raise DataError('module.data.path=corpus.txt: the corpus went away')\n")
    return name


def test_a_job_that_fails_before_its_first_step_raises_its_error_prints_nothing_of_hydras_and_leaves_no_run_dir(
        tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = failing_patch_module(tmp_path, "s9_fails_before_training", "build_args")
    cfg = primus_hydra.compose([*TINY, f"patches.modules=[{module}]"])

    with pytest.raises(PatchError) as raised:
        primus_hydra.run(cfg, tmp_path / "run")

    assert str(raised.value) == ("patch user.fails (build_args) failed: DataError: module.data.path=corpus.txt: the "
                                 "corpus went away")
    assert "Error executing job" not in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # trains two steps
def test_a_job_that_fails_after_training_keeps_its_run_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = failing_patch_module(tmp_path, "s9_fails_after_training", "after_train")
    cfg = primus_hydra.compose([*TINY, f"patches.modules=[{module}]"])

    with pytest.raises(PatchError):
        primus_hydra.run(cfg, tmp_path / "run")

    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2


def test_a_run_dir_the_user_made_is_kept_when_the_job_fails(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = failing_patch_module(tmp_path, "s9_fails_in_a_users_folder", "build_args")
    (tmp_path / "run").mkdir()

    with pytest.raises(PatchError):
        primus_hydra.run(primus_hydra.compose([*TINY, f"patches.modules=[{module}]"]), tmp_path / "run")

    assert (tmp_path / "run").is_dir()


def test_run_runs_where_the_composed_config_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRIMUS_OUTPUT_ROOT", raising=False)
    cfg = primus_hydra.compose(["task.dry_run=true"])

    primus_hydra.run(cfg)

    assert run_dirs(tmp_path) == [tmp_path / cfg.hydra.run.dir]


# ---- an experiment that picks the launcher sweeps where it says ----------------------------------------------------

@pytest.mark.slow  # two dry-run points in their own processes
def test_an_experiment_that_picks_primus_local_sweeps_into_its_own_sweep_dir_and_subdirs(tmp_path):
    write_experiment(tmp_path / "conf", "swept", "defaults:\n  - override /hydra/launcher: primus_local\n"
                     "hydra:\n  sweep:\n    dir: swept\n    subdir: point_${hydra.job.num}\n")
    work = tmp_path / "work"

    result = primus("--config-dir", str(tmp_path / "conf"), "-m", "experiment=swept", "task.dry_run=true",
                    "module.lr=1e-3,2e-3", cwd=work)

    assert result.returncode == 0, result.stderr
    assert run_dirs(work) == [work / "swept" / "point_0", work / "swept" / "point_1"]
