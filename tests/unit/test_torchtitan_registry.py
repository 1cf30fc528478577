"""torchtitan's flavor tables read ahead by a helper process (migrate/torchtitan_registry.py) are what reading them in
this process gives; a folder that never names torchtitan starts no helper."""
from __future__ import annotations

import pytest

from primus_hydra.migrate import torchtitan_registry

pytest.importorskip("torchtitan")


@pytest.fixture
def fresh(monkeypatch):
    """The module as a new process has it: nothing read, no helper."""
    monkeypatch.setattr(torchtitan_registry, "_tables", {})
    monkeypatch.setattr(torchtitan_registry, "_reader", None)
    yield torchtitan_registry
    torchtitan_registry.stop_reading()


def test_tables_read_ahead_are_those_read_here(fresh, tmp_path):
    experiment = tmp_path / "qwen3.yaml"
    experiment.write_text("modules:\n  pre_trainer:\n    framework: torchtitan\n")
    fresh.read_ahead([tmp_path / "absent.yaml", experiment])
    assert fresh._reader is not None
    ahead = {name: fresh.flavor_table(name) for name in ("qwen3", "deepseek_v3", "llama4")}
    assert fresh._reader is None and set(fresh._tables) >= {"llama3", "qwen3", "deepseek_v3", "llama4", "gpt_oss"}
    here = fresh.read_tables(["qwen3", "deepseek_v3", "llama4"])
    for name, table in ahead.items():
        assert table == {flavor: fresh._tree(args) for flavor, args in here[name].items()}
        assert all(type(value) is type(here[name][flavor][key]) for flavor, args in table.items()
                   for key, value in args.items() if not isinstance(value, dict))
    assert ahead["qwen3"]["0.6B"].dim == here["qwen3"]["0.6B"]["dim"]  # read by attribute
    with pytest.raises(ValueError):
        fresh.flavor_table("no_such_model")


def test_a_folder_that_never_names_torchtitan_starts_no_helper(fresh, tmp_path):
    experiment = tmp_path / "llama.yaml"
    experiment.write_text("modules:\n  pre_trainer:\n    framework: megatron\n")
    fresh.read_ahead([experiment])
    assert fresh._reader is None


def test_a_helper_not_needed_is_stopped(fresh, tmp_path):
    experiment = tmp_path / "qwen3.yaml"
    experiment.write_text("framework: torchtitan\n")
    fresh.read_ahead([experiment])
    reader = fresh._reader
    fresh.stop_reading()
    assert fresh._reader is None and reader.returncode is not None
