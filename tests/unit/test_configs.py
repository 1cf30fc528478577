"""Every option of every config group composes and validates (lightning-hydra-template's config tests), and the
search path works for user configs (--config-dir)."""
from __future__ import annotations

import pytest

from helpers.compose import CONF_DIR
from primus_hydra.config.validate import validate_config

GROUPS = ("platform", "module", "backend", "task")
OPTIONS = [(group, path.stem) for group in GROUPS for path in sorted((CONF_DIR / group).glob("*.yaml"))]


def test_each_group_has_its_options():
    options = {group: {name for g, name in OPTIONS if g == group} for group in GROUPS}
    assert options["backend"] == {"torch", "megatron", "torchtitan", "maxtext", "megatron_bridge", "hummingbirdxt"}
    assert options["module"] == {"pre_trainer", "post_trainer"}
    assert {"local"} <= options["platform"] and {"train"} <= options["task"]


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_validates(compose_config, group, option):
    overrides = [f"{group}={option}"]
    if group == "backend" and option != "torch":
        overrides.append("module.data.source=mock")  # only the torch backend has a built-in text corpus
    cfg = compose_config(*overrides)
    assert cfg.get(group) is not None
    validate_config(cfg)


def test_defaults_are_the_documented_ones(compose_config):
    cfg = compose_config()
    assert (cfg.platform.name, cfg.module.name, cfg.model.name, cfg.backend.name, cfg.task.name) == (
        "local", "pre_trainer", "llama_tiny", "torch", "train")


def test_env_substitution_reads_the_environment(compose_config, monkeypatch):
    monkeypatch.setenv("PRIMUS_PEAK_TFLOPS", "1307.4")
    assert compose_config().platform.peak_tflops_per_device == 1307.4
    monkeypatch.delenv("PRIMUS_PEAK_TFLOPS")
    assert compose_config().platform.peak_tflops_per_device is None
