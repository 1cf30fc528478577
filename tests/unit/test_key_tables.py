"""Each external backend's key table (backends/<name>/keys.py) is the one place its names are written: every key
names a canonical key the schema has, the translation writes each translated key's value under its native name,
the import reads it back to the same canonical value, and the import check compares the keys marked checked."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from primus_hydra.backends.key_table import Key, KeyTable
from primus_hydra.backends.maxtext.args import build_maxtext_config
from primus_hydra.backends.maxtext.keys import MAXTEXT_KEYS
from primus_hydra.backends.megatron.args import build_megatron_args
from primus_hydra.backends.megatron.keys import MEGATRON_KEYS
from primus_hydra.backends.megatron_bridge.args import build_megatron_bridge_config
from primus_hydra.backends.megatron_bridge.keys import MEGATRON_BRIDGE_KEYS
from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config
from primus_hydra.backends.torchtitan.keys import TORCHTITAN_KEYS
from primus_hydra.config.layout import configured_world_size, parallel_layout
from primus_hydra.migrate.check import BRIDGE_CHECKED, MAXTEXT_CHECKED, MEGATRON_CHECKED, TORCHTITAN_CHECKED
from primus_hydra.migrate.mapping import Imported
from primus_hydra.migrate.primus_yaml import dotted_get

# values unlike the defaults, so that a key read from the wrong place shows
OVERRIDES = ("module.data.source=mock", "module.lr=0.0007", "module.min_lr=0.00002", "module.warmup_iters=3",
             "module.lr_decay_iters=40", "module.exit_interval=30", "module.seed=7", "module.log.interval=2",
             "module.data.num_workers=1", "launch.nproc_per_node=4", "module.parallel.tp=2",
             "module.global_batch_size=16")
TABLES = {
    "megatron": (MEGATRON_KEYS, lambda cfg, layout, run_dir: build_megatron_args(cfg, layout)),
    "torchtitan": (TORCHTITAN_KEYS, lambda cfg, layout, run_dir: build_torchtitan_job_config(cfg, run_dir, layout)),
    "maxtext": (MAXTEXT_KEYS, lambda cfg, layout, run_dir: build_maxtext_config(cfg, run_dir, layout)),
    "megatron_bridge": (MEGATRON_BRIDGE_KEYS, lambda cfg, layout, run_dir: build_megatron_bridge_config(cfg, run_dir)),
}


def _translated(compose_config, tmp_path, backend: str):
    cfg = compose_config(f"backend={backend}", *OVERRIDES)
    table, translate = TABLES[backend]
    return cfg, table, translate(cfg, parallel_layout(cfg, configured_world_size(cfg)), tmp_path)


@pytest.mark.parametrize("backend", list(TABLES))
def test_every_key_names_a_canonical_key_of_the_schema(compose_config, backend):
    cfg = compose_config(f"backend={backend}")
    table = TABLES[backend][0]
    assert [key.canonical for key in table if OmegaConf.select(cfg, key.canonical, default=KeyError) is KeyError] == []


@pytest.mark.parametrize("backend", list(TABLES))
def test_the_translation_writes_each_translated_key_under_its_native_name(compose_config, tmp_path, backend):
    cfg, table, args = _translated(compose_config, tmp_path, backend)
    wrong = [(key.native, dotted_get(args, key.native, "(missing)"), OmegaConf.select(cfg, key.canonical))
             for key in table if key.translated
             and dotted_get(args, key.native, "(missing)") != OmegaConf.select(cfg, key.canonical)]
    assert wrong == []


@pytest.mark.parametrize("backend", list(TABLES))
def test_the_import_reads_the_translation_back_to_the_canonical_values(compose_config, tmp_path, backend):
    cfg, table, args = _translated(compose_config, tmp_path, backend)
    imported = Imported(backend, None)

    imported.take_keys(args, KeyTable(key for key in table if key.translated))

    expected = {key.canonical: OmegaConf.select(cfg, key.canonical) for key in table if key.translated}
    assert {path: imported.canonical[path] for path in expected} == expected


def test_the_import_check_compares_the_keys_marked_checked():
    assert set(MEGATRON_KEYS.checked()) <= set(MEGATRON_CHECKED)
    assert set(TORCHTITAN_KEYS.checked()) <= set(TORCHTITAN_CHECKED)
    assert set(MAXTEXT_KEYS.checked()) <= set(MAXTEXT_CHECKED)
    assert set(MEGATRON_BRIDGE_KEYS.checked()) == set(BRIDGE_CHECKED.values())
    assert "tensor_model_parallel_size" in MEGATRON_CHECKED and "seed" not in MEGATRON_CHECKED


def test_a_group_reads_one_node():
    with pytest.raises(ValueError, match="key group 'training' reads module and model: one node a group"):
        KeyTable([Key("module.lr", "lr", "training"), Key("model.vocab_size", "vocab_size", "training")])
