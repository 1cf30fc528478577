"""torchtitan's flavor tables read ahead by a helper process (migrate/torchtitan_registry.py) are what reading them in
this process gives, and a later import reads them from the user's cache; a folder that never names torchtitan starts no
helper."""
from __future__ import annotations

import json
import os

import pytest

from primus_hydra.migrate import torchtitan_registry

pytest.importorskip("torchtitan")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """The module as a new process has it: nothing read, no helper, nothing in the user's cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh_cache"))
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


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "primus_hydra" / "torchtitan_tables"


def test_tables_read_once_are_read_from_the_users_cache_by_a_later_import(fresh, monkeypatch, tmp_path, cache):
    experiment = tmp_path / "qwen3.yaml"
    experiment.write_text("modules:\n  pre_trainer:\n    framework: torchtitan\n")
    fresh.read_ahead([experiment])
    assert fresh._reader is not None  # nothing kept yet: the helper reads them
    first = fresh.flavor_table("qwen3")
    kept = list(cache.glob("*.json"))
    assert len(kept) == 1
    monkeypatch.setattr(fresh, "_tables", {})  # a later import, in a new process
    fresh.read_ahead([experiment])
    assert fresh._reader is None and fresh.flavor_table("qwen3") == first
    models = sorted(json.loads(kept[0].read_text()))
    for damaged in ("{not json", "[]", json.dumps({"qwen3": {}})):  # read by the helper again, which keeps its own
        kept[0].write_text(damaged)
        monkeypatch.setattr(fresh, "_tables", {})
        assert not fresh._read_kept(models) and fresh._tables == {} and fresh._kept_at == kept[0]


def test_an_edited_or_upgraded_torchtitan_is_another_key(tmp_path):
    package = tmp_path / "torchtitan"
    (package / "models").mkdir(parents=True)
    source = package / "models" / "args.py"
    source.write_text("DIM = 1\n")
    key = torchtitan_registry.installation_key(package, ["qwen3"])
    assert key == torchtitan_registry.installation_key(package, ["qwen3"])
    assert key != torchtitan_registry.installation_key(package, ["llama3", "qwen3"])
    source.write_text("DIM = 22\n")  # another size
    edited = torchtitan_registry.installation_key(package, ["qwen3"])
    os.utime(source, ns=(1, 1))  # another modification time
    assert len({key, edited, torchtitan_registry.installation_key(package, ["qwen3"])}) == 3
    (package / "new.py").write_text("")
    assert torchtitan_registry.installation_key(package, ["qwen3"]) != key


def test_a_cache_that_cannot_be_written_only_keeps_nothing(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder would be
    torchtitan_registry._keep(blocked / "torchtitan_tables" / "key.json", b"{}")
    assert blocked.read_text() == "" and not list(tmp_path.glob(".*tmp*"))
