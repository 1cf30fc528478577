"""The Python API (primus_hydra.compose, primus_hydra.run) without training, and the user's relative paths of a job
that runs in its run dir (hydra.job.chdir=true) made absolute against the launch folder."""
from __future__ import annotations

import copy
import re
import time
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

import primus_hydra
from helpers.compose import CONF_DIR
from primus_hydra.config.paths import PATH_OR_HUB_ID_KEYS, USER_PATH_KEYS, chdir_launch_dir, make_user_paths_absolute
from primus_hydra.config.values import without_hydra_node
from primus_hydra.errors import ConfigValidationError, PrimusError
from primus_hydra.orchestrator.prepare import prepare


def test_a_source_checkout_imports_its_conf_folder_as_primus_hydra_conf():
    import importlib.util

    assert Path(importlib.util.find_spec("primus_hydra.conf").origin) == CONF_DIR / "__init__.py"


def test_compose_gives_the_command_lines_config_with_its_hydra_node(compose_config):
    cfg = primus_hydra.compose(["backend=megatron", "model=llama3_8b"])

    assert cfg.hydra.job.name == "primus" and cfg.hydra.runtime.choices.backend == "megatron"
    assert OmegaConf.to_container(without_hydra_node(cfg)) == OmegaConf.to_container(
        compose_config("backend=megatron", "model=llama3_8b"))


def test_validation_sees_the_job_without_hydras_node_and_leaves_the_config_whole():
    from primus_hydra.config.values import hydra_node_set_aside

    cfg = primus_hydra.compose(["model=moe_tiny"])
    keys, hydra_node = list(cfg.keys()), cfg._get_node("hydra")
    with hydra_node_set_aside(cfg) as job:
        assert job is cfg and "hydra" not in job and list(job.keys()) == keys[1:]
    assert list(cfg.keys()) == keys and cfg._get_node("hydra") is hydra_node
    with pytest.raises(ConfigValidationError), hydra_node_set_aside(cfg):
        raise ConfigValidationError(["a rule failed"])
    assert list(cfg.keys()) == keys and cfg.hydra.job.name == "primus"
    with open_dict(cfg):
        cfg.stamp = "${now:%f %S}"
    cached = copy.deepcopy(OmegaConf.get_cache(cfg))  # compose() resolved the run dir's ${now:...}
    with hydra_node_set_aside(cfg) as job:  # what the block resolves is not cached in the config after it
        OmegaConf.to_container(job, resolve=True)
        stamped = job.stamp
    assert OmegaConf.get_cache(cfg) == cached and ("%f %S",) not in cached.get("now", {})
    time.sleep(0.002)
    assert cfg.stamp != stamped
    with pytest.raises(ConfigValidationError) as raised:  # a failed rule, through compose(): the same lines
        primus_hydra.compose(["model=moe_tiny", "module.lr=-1"])
    assert any("module.lr" in line for line in raised.value.failures)


def test_compose_can_be_called_again_in_the_same_process():
    assert primus_hydra.compose(["model=moe_tiny"]).model.name == "moe_tiny"
    assert primus_hydra.compose().model.name == "llama_tiny"


def test_compose_leaves_a_notebooks_own_hydra_initialisation_in_place():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        own = GlobalHydra.instance().hydra
        primus_hydra.compose(["model=moe_tiny"])
        assert GlobalHydra.instance().hydra is own
    assert not GlobalHydra.instance().is_initialized()


def test_an_unknown_option_is_the_command_lines_one_line_error():
    with pytest.raises(PrimusError) as raised:
        primus_hydra.compose(["backend=nope"])
    assert str(raised.value) == ("backend=nope is not an option of group 'backend'; available: hummingbirdxt, maxtext, "
                                 "megatron, megatron_bridge, torch, torchtitan")


def test_a_value_of_the_wrong_type_names_its_key():
    with pytest.raises(PrimusError) as raised:
        primus_hydra.compose(["module.train_iters=abc"])
    assert str(raised.value) == "module.train_iters: Value 'abc' of type 'str' could not be converted to Integer"


def test_overrides_are_a_list_not_one_string():
    with pytest.raises(TypeError, match=r"\['model=moe_tiny'\]"):
        primus_hydra.compose("model=moe_tiny")


def test_run_refuses_a_config_without_its_hydra_node(compose_config, tmp_path):
    with pytest.raises(PrimusError, match="takes the config primus_hydra.compose returns"):
        primus_hydra.run(compose_config(), tmp_path / "run")


def test_a_job_that_fails_its_checks_raises_them_and_writes_nothing(tmp_path):
    with pytest.raises(ConfigValidationError) as composed:  # compose checks the rules every run is prepared against
        primus_hydra.compose(["module.train_iters=0"])
    cfg = primus_hydra.compose(["module.train_iters=0"], validate=False)

    with pytest.raises(ConfigValidationError) as raised:  # and run prepares the job whatever it is given
        primus_hydra.run(cfg, tmp_path / "run")
    assert composed.value.failures == raised.value.failures == ["module.train_iters=0: must be >= 1"]
    assert not (tmp_path / "run").exists()
    assert not HydraConfig.initialized()


def test_the_launch_folder_counts_only_for_a_job_that_changes_into_its_run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert chdir_launch_dir(primus_hydra.compose()) is None
    assert chdir_launch_dir(primus_hydra.compose(["hydra.job.chdir=true"])) == str(tmp_path)


def _paths(**values):
    job = OmegaConf.create({"module": {"data": {"source": "text", "path": None},
                                       "checkpoint": {"dir": None, "resume": None, "load": None}},
                            "backend": {"path": None, "tokenizer_model": None}, "task": {"runs": None}})
    for key, value in values.items():
        OmegaConf.update(job, key.replace("__", "."), value)
    return job


@pytest.mark.parametrize("key, value, expected", [
    ("module__data__path", "data/corpus.txt", "/launch/data/corpus.txt"),
    ("module__data__path", "../corpus.txt", "/corpus.txt"),
    ("module__checkpoint__dir", "ckpts", "/launch/ckpts"),
    ("module__checkpoint__load", "./runs/a/checkpoints", "/launch/runs/a/checkpoints"),
    ("backend__path", "third_party/Megatron-LM", "/launch/third_party/Megatron-LM"),
    ("task__runs", "outputs", "/launch/outputs"),
    ("module__data__path", "/data/corpus.txt", "/data/corpus.txt"),
    ("module__data__path", "~/corpus.txt", "~/corpus.txt"),
    ("module__data__path", "s3://bucket/corpus", "s3://bucket/corpus"),
    ("module__checkpoint__resume", "auto", "auto"),
    ("module__data__path", "my data/corpus.txt", "/launch/my data/corpus.txt"),
])
def test_a_relative_user_path_becomes_one_under_the_launch_folder(key, value, expected):
    job = _paths(**{key: value})
    make_user_paths_absolute(job, "/launch")
    assert OmegaConf.select(job, key.replace("__", ".")) == expected


def test_every_schema_key_named_as_a_path_is_made_absolute():
    from test_docs_configuration import schema_leaves

    named_as_paths = {key for key in schema_leaves() if re.search(r"(path|dir|_root)$", key)}
    assert named_as_paths <= set(USER_PATH_KEYS + PATH_OR_HUB_ID_KEYS)


def test_each_path_of_a_data_blend_is_made_absolute_and_its_weights_stay():
    job = _paths(module__data__source="indexed", module__data__path="0.3 data/a_text 0.7 /data/b_text")
    make_user_paths_absolute(job, "/launch")
    assert job.module.data.path == "0.3 /launch/data/a_text 0.7 /data/b_text"


def test_a_tokenizer_is_a_path_only_when_the_launch_folder_has_it(tmp_path):
    (tmp_path / "tokenizer").mkdir()
    local, hub = _paths(backend__tokenizer_model="tokenizer"), _paths(backend__tokenizer_model="meta-llama/Llama-3.1-8B")
    make_user_paths_absolute(local, str(tmp_path))
    make_user_paths_absolute(hub, str(tmp_path))
    assert local.backend.tokenizer_model == str(tmp_path / "tokenizer")
    assert hub.backend.tokenizer_model == "meta-llama/Llama-3.1-8B"


def test_a_job_that_changes_into_its_run_dir_is_prepared_with_the_launch_folders_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("corpus.txt").write_text("text " * 100)
    cfg = primus_hydra.compose(["hydra.job.chdir=true", "module.data.path=corpus.txt"])

    job = prepare(cfg, trains=False)
    assert job.cfg.module.data.path == str(tmp_path / "corpus.txt")
    assert cfg.module.data.path == "corpus.txt"  # the composed config, as typed (Hydra's .hydra/config.yaml)


def test_a_job_that_stays_in_the_launch_folder_keeps_its_paths_as_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("corpus.txt").write_text("text " * 100)

    job = prepare(primus_hydra.compose(["module.data.path=corpus.txt"]), trains=False)
    assert job.cfg.module.data.path == "corpus.txt"
