"""config/job_composition.py composes the job's config without Hydra's own: for every option of every group, and for
overrides of each kind, it is Hydra's job config node for node (values, node types, schemas, flags); where it cannot
be sure it answers None and the caller composes with Hydra."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from helpers.compose import GROUP_OPTIONS, hydras_job_config, nodes
from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir

fast_composition.install()
register_schemas()
CONF = find_conf_dir()


def assert_same_as_hydras(overrides: list[str]) -> None:
    job = compose_job_config(CONF, "config", overrides)
    assert job is not None, overrides
    hydras = hydras_job_config(overrides)
    assert OmegaConf.to_yaml(job) == OmegaConf.to_yaml(hydras)
    assert nodes(job) == nodes(hydras)


def test_the_default_config_is_hydras():
    assert_same_as_hydras([])


@pytest.mark.parametrize("options", [GROUP_OPTIONS[index::4] for index in range(4)], ids=lambda options: options[0])
def test_every_option_of_every_group_is_hydras(options):
    assert len(GROUP_OPTIONS) > 60
    for option in options:
        assert_same_as_hydras([option])


@pytest.mark.parametrize("overrides", [
    ["backend=megatron", "model=llama3_8b", "module.lr=2e-4", "module.train_iters=7"],
    ["task=projection", "platform=slurm", "hardware=mi300x"],  # configs that override Hydra's groups
    ["experiment=llama3_8b_pretrain_megatron", "model.num_layers=4", "~logger"],
    ["+module.extra_args.new_key=1", "backend=megatron"],
    ["module.lr=${module.min_lr}"],
])
def test_overrides_of_each_kind_are_hydras(overrides):
    assert_same_as_hydras(overrides)


def test_a_search_path_override_is_read_as_hydra_reads_it(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nmodule:\n  train_iters: 3\n")
    overrides = ["experiment=mine", f"hydra.searchpath=[file://{tmp_path}]"]
    job = compose_job_config(CONF, "config", overrides)
    assert job is not None and job.module.train_iters == 3
    assert nodes(job) == nodes(hydras_job_config(overrides))


@pytest.mark.parametrize("overrides", [
    ["hydra.run.dir=elsewhere"],  # Hydra's own config
    ["hydra/launcher=primus_local"],
    ["module.lr=1e-3,2e-3"],  # a sweep
    ["model=no_such_model"],  # errors are worded by Hydra's own path
    ["module.no_such_key=1"],
    ["module.lr=not_a_number"],
])
def test_what_needs_hydras_own_path_answers_none(overrides):
    assert compose_job_config(CONF, "config", overrides) is None


def test_an_unknown_plugin_package_answers_none(monkeypatch):
    from primus_hydra.config import job_composition

    monkeypatch.setattr(job_composition, "KNOWN_PLUGIN_PACKAGES", frozenset({"primus_sweeper"}))
    assert compose_job_config(CONF, "config", []) is None


@pytest.mark.parametrize("args, request_", [
    (["--cfg", "job"], ([], None)),
    (["model=llama3_8b", "-c", "job", "-p", "model"], (["model=llama3_8b"], "model")),
    (["--cfg=job", "--package=module.optimizer", "module.lr=1e-3"], (["module.lr=1e-3"], "module.optimizer")),
    (["--cfg", "all"], None),
    (["--cfg", "job", "--resolve"], None),
    (["--cfg", "job", "-m"], None),
    (["-cd", "mine", "--cfg", "job"], None),
    (["model=llama3_8b"], None),  # a run
])
def test_the_command_line_takes_this_path_only_for_cfg_job(args, request_):
    from primus_hydra.cli import _job_config_request

    assert _job_config_request(args) == request_


def test_a_package_prints_as_hydra_prints_it(capsys):
    from primus_hydra.cli import _printed_job_config

    assert _printed_job_config(["--cfg", "job", "-p", "model.hidden_size", "model=llama3_8b"])
    assert capsys.readouterr().out == "4096\n"
    assert _printed_job_config(["--cfg", "job", "-p", "model.moe"])
    assert capsys.readouterr().out.startswith("# @package model.moe\nnum_experts: 0\n")
    assert not _printed_job_config(["--cfg", "job", "-p", "no.such.package"])  # Hydra's path says so
