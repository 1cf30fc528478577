"""config/run_composition.py composes a run's whole config with the `hydra` node kept from Hydra's composition
(config/kept_nodes.py): for every option of every group and for overrides of each kind (Hydra's values
included) it is the config Hydra's own loader composes, node for node; where it cannot be sure (a group of Hydra's,
a search path, a combination with no kept node) it answers None and Hydra composes. The kept file itself:
tests/unit/test_kept_nodes.py."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.plugins import Plugins
from hydra.core.utils import JobRuntime
from hydra.version import VersionBase
from omegaconf import OmegaConf

from helpers.compose import (
    GROUP_OPTIONS,
    KEPT_NODES_REASON,
    hydras_run_config,
    kept_nodes_fit_this_installation,
    nodes,
)
from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.run_composition import RUN_MODE_OVERRIDE, compose_run_config

fast_composition.install()
register_schemas()
Plugins.instance()  # as Hydra's own path scans them: the plugins' config classes are the ones composition uses
CONF = find_conf_dir()
JOB_NAME = "cli"
pytestmark = pytest.mark.skipif(not kept_nodes_fit_this_installation(), reason=KEPT_NODES_REASON)


@pytest.fixture(autouse=True)
def as_the_command_line_sets_hydra(monkeypatch):
    """The version base and task name Hydra's command line sets before it composes."""
    monkeypatch.setattr(VersionBase.instance(), "version_base", VersionBase.instance().version_base)
    from hydra import version

    version.setbase("1.3")
    JobRuntime.instance().set("name", JOB_NAME)


def assert_same_as_hydras(overrides: list[str], search_path_dir: str = CONF) -> None:
    cfg = compose_run_config(search_path_dir, "config", overrides, job_name=JOB_NAME)
    assert cfg is not None, f"{overrides}: composed by Hydra (no kept `hydra` node? run scripts/make_kept_nodes.py)"
    hydras = hydras_run_config(overrides, search_path_dir)
    assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(hydras)
    assert nodes(cfg) == nodes(hydras)


def test_the_default_config_is_hydras():
    assert_same_as_hydras([])


def test_the_python_apis_package_source_is_hydras():
    assert_same_as_hydras(["model=llama3_8b"], "pkg://primus_hydra.conf")


@pytest.mark.parametrize("options", [GROUP_OPTIONS[index::4] for index in range(4)], ids=lambda options: options[0])
def test_every_option_of_every_group_is_hydras(options):
    assert len(GROUP_OPTIONS) > 60
    for option in options:
        if option.startswith("experiment="):  # an experiment that sets hydra.* has its own node, or none
            if compose_run_config(CONF, "config", [option], job_name=JOB_NAME) is None:
                continue
        assert_same_as_hydras([option])


@pytest.mark.parametrize("overrides", [
    ["backend=megatron", "model=llama3_8b", "module.lr=2e-4", "module.train_iters=7"],
    ["platform=slurm", "hardware=mi300x", "hydra.launcher.nodes=2"],  # a platform that overrides Hydra's launcher
    ["experiment=llama3_8b_pretrain_megatron", "model.num_layers=4", "~logger"],
    ["+module.extra_args.new_key=1", "backend=megatron"],
    ["module.lr=${module.min_lr}"],
    ["hydra.run.dir=elsewhere", "hydra.job.chdir=true", "hydra.verbose=true"],  # values of Hydra's config
    ["+hydra.job.env_set.PRIMUS_X=1", "hydra.job.env_copy=[HOME]", "hydra.job.name=mine"],
    ["task.dry_run=true", "hydra.job.config.override_dirname.exclude_keys=[task.dry_run]", RUN_MODE_OVERRIDE],
])
def test_overrides_of_each_kind_are_hydras(overrides):
    assert_same_as_hydras(overrides)


def test_the_command_lines_run_mode_is_added_as_hydras_command_line_adds_it():
    cfg = compose_run_config(CONF, "config", ["model=llama3_8b"], job_name=JOB_NAME, add_run_mode=True)
    hydras = hydras_run_config(["model=llama3_8b", RUN_MODE_OVERRIDE])
    assert nodes(cfg) == nodes(hydras) and str(cfg.hydra.mode) == "RunMode.RUN"


@pytest.mark.parametrize("overrides", [
    ["hydra/launcher=primus_local"],  # a group of Hydra's: its config is composed again
    ["hydra.searchpath=[file:///tmp]"],
    ["module.lr=1e-3,2e-3"],  # a sweep
    ["model=no_such_model"],  # errors are worded by Hydra's own path
    ["hydra.no_such_key=1"],
    ["hydra.run=not_a_dict"],
])
def test_what_needs_hydras_own_path_answers_none(overrides):
    assert compose_run_config(CONF, "config", overrides, job_name=JOB_NAME) is None


def test_another_conf_dir_answers_none(tmp_path):
    (tmp_path / "config.yaml").write_text("a: 1\n")
    assert compose_run_config(str(tmp_path), "config", [], job_name=JOB_NAME) is None


def test_a_combination_with_no_kept_node_answers_none(monkeypatch):
    from primus_hydra.config import kept_nodes
    from primus_hydra.config.job_composition import compose_job

    overrides = ["task=plan", "platform=slurm"]
    assert compose_run_config(CONF, "config", overrides, job_name=JOB_NAME) is not None
    job = compose_job(CONF, "config", overrides)
    section = kept_nodes._current_section("hydra", Path(CONF))
    key = kept_nodes.key_of(job.hydra_sections, job.hydra_entries)
    monkeypatch.setitem(section, "nodes", {name: node for name, node in section["nodes"].items() if name != key})
    assert compose_run_config(CONF, "config", overrides, job_name=JOB_NAME) is None
