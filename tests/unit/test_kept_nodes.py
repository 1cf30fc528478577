"""config/kept_nodes.py: the kept file holds what Hydra and OmegaConf make today (else scripts/make_kept_nodes.py
must run), is not used where it was made from other sources or versions, and builds nothing but classes."""
from __future__ import annotations

import pickle
from pathlib import Path

import omegaconf._utils
import pytest
from hydra.core.plugins import Plugins
from hydra.core.utils import JobRuntime

from helpers.compose import KEPT_NODES_REASON, kept_nodes_fit_this_installation, nodes
from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition, kept_nodes
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.run_composition import compose_run_config
from primus_hydra.config.schema import PrimusConfig

fast_composition.install()
register_schemas()
Plugins.instance()
CONF = find_conf_dir()
VERSIONS = ("python", "hydra", "omegaconf")


@pytest.fixture(autouse=True)
def checked_again(monkeypatch):
    """Each test checks the file's sections afresh (a process checks them once)."""
    monkeypatch.setattr(kept_nodes, "_loaded", {})
    JobRuntime.instance().set("name", "cli")


def fresh_or_skip(section: dict, conf_files: dict) -> None:
    now = kept_nodes.fingerprint(section["source_modules"], conf_files)
    if now == section["fingerprint"]:
        return
    assert {name: now[name] for name in VERSIONS} != {name: section["fingerprint"][name] for name in VERSIONS}, \
        "a source the kept nodes were made from changed: run scripts/make_kept_nodes.py"
    pytest.skip(f"made with {[section['fingerprint'][name] for name in VERSIONS]}, this is "
                f"{[now[name] for name in VERSIONS]}: the kept nodes are not used here")


def test_the_kept_hydra_nodes_are_what_hydra_composes_now():
    """Each kept `hydra` node is the one Hydra's composition makes today. Where the installed Hydra, OmegaConf or
    Python is not the file's, the nodes are not used at all (and Hydra composes every command)."""
    section = kept_nodes._kept_file()["hydra"]
    fresh_or_skip(section, kept_nodes.conf_hydra_files(Path(CONF)))
    for overrides in ([], ["platform=slurm"], ["task=plan"], ["task=projection"], ["task=prepare_data"]):
        key, entry, hydra_source = kept_nodes.made_by_hydra(CONF, "config", overrides)
        assert key in section["nodes"], overrides
        assert entry["hydra_choices"] == section["nodes"][key]["hydra_choices"]
        assert tuple(section["hydra_source"]) == hydra_source
        assert nodes(kept_nodes._NodeUnpickler.loads(entry["node"])) == nodes(kept_nodes.hydra_node_of(section, key))


def test_the_kept_schema_nodes_are_what_omegaconf_builds_now(monkeypatch):
    section = kept_nodes._kept_file()["schemas"]
    fresh_or_skip(section, {})
    assert len(section["classes"]) >= 20
    monkeypatch.setitem(kept_nodes._loaded, ("schemas", "None"), None)  # built by OmegaConf, not read
    import importlib

    for key in section["classes"]:
        module, qualname, allow_objects = key.split(":")
        cls = getattr(importlib.import_module(module), qualname)
        built = omegaconf._utils.get_structured_config_data(cls, allow_objects={"None": None, "True": True}[allow_objects])
        kept = kept_nodes._loads(section["classes"][key])
        assert list(built) == list(kept), key
        for name in built:
            assert nodes(built[name]) == nodes(kept[name]), (key, name)


def test_the_kept_stored_schemas_are_what_omegaconf_makes_now_and_every_stored_class_has_one(monkeypatch):
    """Each class this project stores in Hydra's ConfigStore is converted, when first loaded, to the node kept for it:
    OmegaConf.structured's own, node for node, flags and types included."""
    from omegaconf import OmegaConf

    from primus_hydra.config.stored_nodes import stored_classes

    section = kept_nodes._kept_file()["schemas"]
    fresh_or_skip(section, {})
    classes = stored_classes("primus_hydra")
    assert sorted(section["stored"]) == sorted(kept_nodes.schema_key(cls, None) for cls in classes)
    monkeypatch.setitem(kept_nodes._loaded, ("schemas", "None"), None)  # built by OmegaConf, not read
    for cls in classes:
        kept = kept_nodes._loads(section["stored"][kept_nodes.schema_key(cls, None)])
        built = OmegaConf.structured(cls)
        assert nodes(built) == nodes(kept), cls
        assert (built._metadata.flags, built._metadata.object_type, built._metadata.ref_type) == \
            (kept._metadata.flags, kept._metadata.object_type, kept._metadata.ref_type), cls
        assert OmegaConf.to_yaml(built) == OmegaConf.to_yaml(kept), cls


@pytest.mark.skipif(not kept_nodes_fit_this_installation(), reason=KEPT_NODES_REASON)
def test_a_section_made_from_other_sources_is_not_used(monkeypatch):
    assert kept_nodes.kept_schema_data(PrimusConfig, None) is not None
    assert compose_run_config(CONF, "config", [], job_name="cli") is not None
    made = kept_nodes.fingerprint

    def edited(modules, conf_files):  # as after an edit of a schema and of conf/hydra/callbacks/primus.yaml
        found = made(modules, conf_files)
        found["digests"] = {name: "0" * 32 for name in found["digests"]}
        return found

    monkeypatch.setattr(kept_nodes, "fingerprint", edited)
    monkeypatch.setattr(kept_nodes, "_loaded", {})
    assert kept_nodes.kept_schema_data(PrimusConfig, None) is None
    assert compose_run_config(CONF, "config", [], job_name="cli") is None


def test_a_file_that_names_a_function_is_refused(tmp_path, monkeypatch):
    class Calls:
        def __reduce__(self):
            import os

            return os.getcwd, ()

    hostile = tmp_path / "kept.pickle"
    hostile.write_bytes(pickle.dumps({"format": kept_nodes.FORMAT, "x": Calls()}))
    with pytest.raises(pickle.UnpicklingError, match="getcwd, which is not a class"):
        kept_nodes._NodeUnpickler.loads(hostile.read_bytes())
    monkeypatch.setattr(kept_nodes, "KEPT_NODES_FILE", hostile)
    assert kept_nodes.kept_schema_data(PrimusConfig, None) is None
    assert compose_run_config(CONF, "config", [], job_name="cli") is None


def test_a_missing_file_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(kept_nodes, "KEPT_NODES_FILE", tmp_path / "none.pickle")
    assert kept_nodes.kept_schema_data(PrimusConfig, None) is None
    assert compose_run_config(CONF, "config", ["model=llama3_8b"], job_name="cli") is None


def test_every_schema_class_a_shipped_option_builds_is_kept(monkeypatch):
    """A new schema (a task's, a backend's) is in the file once scripts/make_kept_nodes.py ran: else every command
    builds it (correct, only slower)."""
    from primus_hydra.config.job_composition import compose_job_config

    fresh_or_skip(kept_nodes._kept_file()["schemas"], {})
    asked, kept = [], kept_nodes.kept_schema_data

    def recording(cls, allow_objects):
        found = kept(cls, allow_objects)
        asked.append((kept_nodes.schema_key(cls, allow_objects), found is not None))
        return found

    monkeypatch.setattr(kept_nodes, "kept_schema_data", recording)
    import omegaconf.basecontainer
    import omegaconf.dictconfig

    from primus_hydra.config import fast_omegaconf

    for module in (omegaconf._utils, omegaconf.basecontainer, omegaconf.dictconfig):  # restored after the test
        monkeypatch.setattr(module, "get_structured_config_data", module.get_structured_config_data)
    fast_omegaconf._keep_schema_sections_built_twice()  # a wrapper that asks `recording`, as a process's first builds
    conf = Path(CONF)
    for group in ("task", "backend", "logger", "hardware", "platform"):
        for path in sorted((conf / group).glob("*.yaml")):
            compose_job_config(CONF, "config", [f"{group}={path.stem}"])
    assert asked and [key for key, found in asked if not found] == []


def test_every_conf_file_loads_as_omegaconfs_own_load_makes_it(monkeypatch):
    from omegaconf import OmegaConf

    section = kept_nodes._kept_file()["files"]
    fresh_or_skip(section, {})
    own_load = OmegaConf.load.__wrapped__  # fast_omegaconf's item 14 stands in front of it
    counted = _counting(kept_nodes._loads)
    monkeypatch.setattr(kept_nodes, "_loads", counted)
    files = sorted(Path(CONF).rglob("*.yaml"))
    for path in files:
        with open(path, encoding="utf-8") as stream:
            stream.read(100)  # Hydra's sources read the header first, then seek back
            stream.seek(0)
            kept = OmegaConf.load(stream)
        with open(path, encoding="utf-8") as stream:
            assert nodes(kept) == nodes(own_load(stream)), path
    assert counted.calls == len(files) >= 70  # each one kept


def test_a_text_not_kept_and_a_stream_that_cannot_seek_are_read_as_before(tmp_path):
    import io

    from omegaconf import OmegaConf

    text = (Path(CONF) / "config.yaml").read_text() + "\nextra_key: 1\n"  # a user's edit
    assert kept_nodes.kept_loaded_file(text) is None
    (tmp_path / "edited.yaml").write_text(text)
    with open(tmp_path / "edited.yaml", encoding="utf-8") as stream:
        assert OmegaConf.load(stream).extra_key == 1
    with pytest.raises(Exception, match="found duplicate key extra_key"):  # an error is OmegaConf's own
        OmegaConf.load(io.StringIO(text + "extra_key: 2\n"))

    class Unseekable(io.StringIO):
        def tell(self):
            raise io.UnsupportedOperation("not seekable")

    assert OmegaConf.load(Unseekable("a: 1\n")).a == 1


def _counting(function):
    def counted(*args, **kwargs):
        counted.calls += 1
        return function(*args, **kwargs)

    counted.calls = 0
    return counted
