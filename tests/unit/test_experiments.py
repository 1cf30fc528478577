"""Every recipe in conf/experiment composes, passes validation (the generic rules and its backend's own), and
exports its backend's arguments in a dry run; the CLI prints one without importing torch."""
from __future__ import annotations

import math

import pytest
import yaml

from helpers.compose import CONF_DIR, run_job
from primus_hydra.orchestrator.prepare import prepare

EXPERIMENTS = sorted(path.stem for path in (CONF_DIR / "experiment").glob("*.yaml"))
REQUIRED = {
    "llama3_8b_pretrain_megatron", "llama3_8b_pretrain_torchtitan", "deepseek_v2_lite_pretrain_megatron",
    "llama3.1_8b_pretrain_maxtext", "tiny_smoke",
}


def test_the_required_recipes_exist():
    assert REQUIRED <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_is_a_global_package_recipe(experiment):
    text = (CONF_DIR / "experiment" / f"{experiment}.yaml").read_text()
    assert text.startswith("# @package _global_\n")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_is_a_valid_job(compose_config, experiment):
    # the rules, its backend's, its layout: prepared for the GPU nodes it is written for, not for this machine
    job = prepare(compose_config(f"experiment={experiment}"), on_this_machine=False)
    assert job.layout.world_size >= 1


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_exports_its_backend_arguments_in_a_dry_run(compose_config, tmp_path, experiment):
    cfg = compose_config(f"experiment={experiment}", "task.dry_run=true")
    assert math.isnan(run_job(cfg, tmp_path))  # a dry run trains nothing: no objective
    assert yaml.safe_load((tmp_path / "backend_args.yaml").read_text())


def test_llama3_8b_megatron_recipe_selects_its_groups(compose_config):
    cfg = compose_config("experiment=llama3_8b_pretrain_megatron")
    assert (cfg.backend.name, cfg.model.name, cfg.launch.nproc_per_node) == ("megatron", "llama3_8b", 8)
    assert cfg.module.data.source == "mock"
