"""module.checkpoint.dir is resolved once, when the job is prepared (config/paths.py: resolve_checkpoint_dir): `~`
expanded, made absolute, <run_dir>/checkpoints when unset; the prepared config the workers read and every backend's
own arguments hold that one folder."""
from __future__ import annotations

import pytest
import yaml

from helpers.compose import run_job
from primus_hydra.launch.slurm.submission import stage_job
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.runtime.train_runtime import RESOLVED_CONFIG_FILE

STEP_LOOP_BACKENDS = ("torch", "megatron", "torchtitan")


def dry_run(compose_config, run_dir, backend: str, *overrides: str) -> tuple[dict, dict]:
    """The job config the workers would read, and the backend's translated arguments."""
    run_job(compose_config("task.dry_run=true", f"backend={backend}", "module.data.source=mock", *overrides), run_dir)
    job_config = yaml.safe_load((run_dir / RESOLVED_CONFIG_FILE).read_text())
    return job_config, yaml.safe_load((run_dir / "backend_args.yaml").read_text())


@pytest.mark.parametrize("backend", STEP_LOOP_BACKENDS)
def test_a_checkpoint_dir_under_home_is_the_same_absolute_folder_for_every_backend(compose_config, tmp_path,
                                                                                  monkeypatch, backend):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    job_config, _ = dry_run(compose_config, tmp_path / "run", backend, "module.checkpoint.dir='~/ckpt'")
    assert job_config["module"]["checkpoint"]["dir"] == str(tmp_path / "home" / "ckpt")


@pytest.mark.parametrize("backend", STEP_LOOP_BACKENDS)
def test_an_unset_checkpoint_dir_is_the_run_dirs_checkpoints_folder(compose_config, tmp_path, backend):
    job_config, _ = dry_run(compose_config, tmp_path / "run", backend)
    assert job_config["module"]["checkpoint"]["dir"] == str(tmp_path / "run" / "checkpoints")


def test_a_relative_checkpoint_dir_is_made_absolute_against_the_launch_folder(compose_config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job_config, _ = dry_run(compose_config, tmp_path / "run", "torchtitan", "module.checkpoint.dir=ckpt")
    assert job_config["module"]["checkpoint"]["dir"] == str(tmp_path / "ckpt")


def test_megatron_saves_into_the_resolved_checkpoint_dir(compose_config, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _, args = dry_run(compose_config, tmp_path / "run", "megatron", "module.checkpoint.dir='~/ckpt'")
    assert args["save"] == str(tmp_path / "home" / "ckpt")


def test_the_native_trainer_reads_the_resolved_checkpoint_dir(compose_config, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _, args = dry_run(compose_config, tmp_path / "run", "torch", "module.checkpoint.dir='~/ckpt'")
    assert args["module"]["checkpoint"]["dir"] == str(tmp_path / "home" / "ckpt")


def test_a_job_prepared_before_its_run_dir_gets_its_checkpoint_dir_when_staged_for_slurm(compose_config, tmp_path):
    """A Slurm sweep prepares its points before their run dirs exist; the folder is filled in when each is staged."""
    job = prepare(compose_config(), world_size=1, on_this_machine=False, trains=False)
    assert job.cfg.module.checkpoint.dir is None
    stage_job(job, tmp_path / "run", {})
    assert job.cfg.module.checkpoint.dir == str(tmp_path / "run" / "checkpoints")
