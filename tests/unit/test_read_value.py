"""config/values.read_value: what node[key] gives, read from the node where OmegaConf's lookups add nothing."""
from __future__ import annotations

import dataclasses
from typing import Optional

import pytest
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf, open_dict

from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config.fast_composition import install
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.values import read_value


def _every_key(node: DictConfig):
    for key in node.keys():
        yield node, key
        child = node._get_node(key)
        if isinstance(child, DictConfig) and isinstance(child.__dict__["_content"], dict):
            yield from _every_key(child)


@pytest.mark.parametrize("overrides", [["backend=megatron", "model=deepseek_v3"], ["model=moe_tiny"]])
def test_every_value_of_a_composed_config_reads_as_node_key_reads_it(overrides):
    install()
    register_schemas()
    cfg = compose_job_config(find_conf_dir(), "config", overrides)
    with open_dict(cfg):
        cfg.merge_with({"backend": {"extra_args": {"nested": {"a": 1}, "listed": [1, {"b": 2}], "none": None,
                                                   "alias": "${module}", "text": "x${model.num_layers}"}}})
    read = 0
    for node, key in _every_key(cfg):
        if node._get_node(key)._is_missing():
            assert read_value(node, key) == "???"
            continue
        value, expected = read_value(node, key), node[key]
        assert type(value) is type(expected) and (value is expected if isinstance(value, (DictConfig, ListConfig))
                                                  else value == expected or value != value), f"{node._get_full_key(key)}"
        read += 1
    assert read > 200


@dataclasses.dataclass
class _Inner:
    a: int = 1


@dataclasses.dataclass
class _Outer:
    unset: Optional[_Inner] = None
    section: _Inner = MISSING
    value: int = MISSING


def test_a_section_of_none_reads_as_none_and_one_left_missing_as_its_text():
    cfg = OmegaConf.structured(_Outer)
    assert isinstance(cfg._get_node("unset"), DictConfig) and read_value(cfg, "unset") is None is cfg.unset
    assert read_value(cfg, "section") == "???" and read_value(cfg, "value") == "???"
