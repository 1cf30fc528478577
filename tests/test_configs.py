"""Every option of every config group composes and validates (lightning-hydra-template's config tests), and the
search path works for user configs (--config-dir)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CONF_DIR
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


def test_config_dir_adds_a_users_model_preset(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "my_model.yaml").write_text(
        "name: my_model\nhidden_size: 512\nnum_layers: 2\nnum_attention_heads: 8\nnum_kv_heads: 8\n"
        "ffn_hidden_size: 1024\nvocab_size: 256\nmax_position_embeddings: 512\n"
    )
    result = subprocess.run([sys.executable, "-m", "primus_hydra", "--config-dir", str(tmp_path), "model=my_model", "--cfg", "job",
                             "-p", "model"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "hidden_size: 512" in result.stdout and "rope_theta: 10000.0" in result.stdout  # schema defaults filled in


def test_user_preset_with_a_stale_key_fails_at_composition(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "stale.yaml").write_text("name: stale\nmoe_force_load_balance: true\n")
    result = subprocess.run([sys.executable, "-m", "primus_hydra", "--config-dir", str(tmp_path), "model=stale", "--cfg", "job"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: model.moe_force_load_balance: Key 'moe_force_load_balance' not in 'ModelConfig'"
