"""The config of an imported experiment's choices with the model merged last (tasks/import_bases.py) is Hydra's own
composition of those choices, node for node: for every model of conf/, every backend and module, and a generated
model in a config dir; a model config of another shape is merged by Hydra's own loop."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from omegaconf import OmegaConf

from helpers.compose import hydras_job_config, nodes
from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.tasks.import_bases import model_merged_last
from primus_hydra.tasks.import_composition import _search_path_override

fast_composition.install()
register_schemas()
CONF = find_conf_dir()
MODELS = sorted(path.stem for path in (Path(CONF) / "model").glob("*.yaml"))
BACKENDS = sorted(path.stem for path in (Path(CONF) / "backend").glob("*.yaml"))
MODULES = sorted(path.stem for path in (Path(CONF) / "module").glob("*.yaml"))


@pytest.fixture
def hydras_loops(monkeypatch) -> list:
    """The defaults lists Hydra's own merge loop merged, one per call."""
    calls = []
    loop = ConfigLoaderImpl._compose_config_from_defaults_list

    def counted(self, defaults, repo):
        calls.append([entry.config_path for entry in defaults])
        return loop(self, defaults, repo)

    monkeypatch.setattr(ConfigLoaderImpl, "_compose_config_from_defaults_list", counted)
    return calls


def assert_hydras(overrides: list[str], chosen: tuple = ()) -> None:
    hydras = hydras_job_config(overrides)
    ours = compose_job_config(CONF, "config", overrides, model_merged_last(chosen))
    assert hydras is not None and ours is not None, overrides
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(hydras), overrides
    assert nodes(ours) == nodes(hydras), overrides


def test_every_model_of_conf_is_hydras(hydras_loops):
    for model in MODELS:
        assert_hydras(["backend=megatron", f"model={model}"], ("megatron",))
    # beside Hydra's own compositions of the comparison, its loop merged the configs without the model once
    merged_without_model = [paths for paths in hydras_loops if not any(path.startswith("model/") for path in paths)]
    assert len(merged_without_model) == 1 and len(hydras_loops) == len(MODELS) + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_every_backend_and_module_is_hydras(backend, module):
    for model in ("llama3_8b", "deepseek_v3"):
        assert_hydras([f"module={module}", f"backend={backend}", f"model={model}"], (module, backend))


def test_a_generated_model_in_a_config_dir_is_hydras(tmp_path):
    (tmp_path / "model").mkdir()
    text = (Path(CONF) / "model" / "llama3_8b.yaml").read_text().replace("num_layers: 32", "num_layers: 30")
    (tmp_path / "model" / "llama3_8b_primus.yaml").write_text(text)
    overrides = ["backend=torchtitan", "model=llama3_8b_primus", _search_path_override(tmp_path)]
    assert_hydras(overrides, ("torchtitan",))
    assert compose_job_config(CONF, "config", overrides, model_merged_last(("torchtitan",))).model.num_layers == 30


@pytest.mark.parametrize("text", [
    "defaults:\n  - llama3_8b\n  - _self_\nnum_layers: 30\n",  # a model config with defaults of its own
    "# @package _global_\nmodel:\n  num_layers: 30\nmodule:\n  train_iters: 7\n",  # another package
])
def test_a_model_config_of_another_shape_is_merged_by_hydras_loop(tmp_path, hydras_loops, text):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "other.yaml").write_text(text)
    overrides = ["backend=megatron", "model=other", _search_path_override(tmp_path)]
    hydras_loops.clear()
    ours = compose_job_config(CONF, "config", overrides, model_merged_last(("megatron",)))
    assert ours is not None and ours.model.num_layers == 30
    assert any("model/other" in paths for paths in hydras_loops)  # the whole list, in Hydra's loop
    assert nodes(ours) == nodes(hydras_job_config(overrides))


def test_a_config_after_the_models_that_writes_model_keeps_hydras_order(tmp_path):
    (tmp_path / "backend").mkdir()
    (tmp_path / "backend" / "sets_model.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /backend@backend: megatron\n  - _self_\nmodel:\n  num_layers: 3\n")
    overrides = ["backend=sets_model", "model=llama3_8b", _search_path_override(tmp_path)]
    ours = compose_job_config(CONF, "config", overrides, model_merged_last(("sets_model",)))
    assert ours is not None and ours.model.num_layers == 3  # the backend's, merged after the model's 32
    assert nodes(ours) == nodes(hydras_job_config(overrides))
