"""config/fast_composition.py changes how fast a config is composed, never what it is: libyaml's parser reads every
shipped file exactly as OmegaConf's own loader does, and a command line's run composes once with the config it
would have composed twice."""
from __future__ import annotations

import contextlib
import dataclasses
import enum
from pathlib import Path
from typing import Optional, Union

import hydra
import pytest
import yaml
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from helpers.compose import KEPT_NODES_REASON, hydras_own_composition, kept_nodes_fit_this_installation, nodes
from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition, fast_omegaconf
from primus_hydra.config.paths import find_conf_dir

fast_composition.install()
PYTHON_LOADER = fast_omegaconf.python_yaml_loader()
SHIPPED = sorted(Path(find_conf_dir()).rglob("*.yaml")) + sorted((Path(hydra.__file__).parent / "conf").rglob("*.yaml"))


def test_every_shipped_file_reads_the_same_with_the_c_parser():
    from omegaconf._utils import get_yaml_loader

    assert get_yaml_loader() is not PYTHON_LOADER
    for path in SHIPPED:
        text = path.read_text()
        assert yaml.load(text, Loader=get_yaml_loader()) == yaml.load(text, Loader=PYTHON_LOADER), path


@pytest.mark.parametrize("text, value", [("x: 1e-4", 1e-4), ("x: 2024-01-01", "2024-01-01"), ("x: 1_000", 1000),
                                         ("x: .nan", "nan"), ("x: yes", True)])
def test_omegaconfs_own_rules_hold(text, value):
    got = OmegaConf.create(text).x
    assert (str(got) if value == "nan" else got) == value


def test_a_key_written_twice_is_refused_as_omegaconf_refuses_it():
    with pytest.raises(yaml.constructor.ConstructorError, match="found duplicate key a"):
        OmegaConf.create("a: 1\na: 2\n")


@pytest.mark.parametrize("text", ["a: [1, 2\nb: 3\n", "a:\n\tb: 1\n", "a: 'x\n", "a: b: c\n"])
def test_a_file_libyaml_refuses_gets_omegaconfs_own_error(tmp_path, text):
    from omegaconf._utils import get_yaml_loader

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    errors = []
    for loader_class in (get_yaml_loader(), PYTHON_LOADER):
        with open(path) as stream, pytest.raises(yaml.YAMLError) as caught:
            yaml.load(stream, Loader=loader_class)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and str(path) in errors[0]


def composition_calls(monkeypatch) -> list:
    calls = []
    real = ConfigLoaderImpl._load_configuration_impl

    def counted(self, *args, **kwargs):
        calls.append(args[2] if len(args) > 2 else kwargs["run_mode"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "_load_configuration_impl", counted)
    return calls


def loader() -> ConfigLoaderImpl:
    register_schemas()
    return ConfigLoaderImpl(config_search_path=create_config_search_path(find_conf_dir()))


@pytest.mark.parametrize("overrides", [[], ["task=plan"], ["backend=megatron", "model=moe_tiny", "module.lr=0.01"]])
@pytest.mark.parametrize("hydras_config", ["composed", "kept"])
def test_a_run_composes_once_and_gets_the_config_it_would_have_composed_twice(monkeypatch, overrides, hydras_config):
    with hydras_own_composition():
        fresh = loader().load_configuration("config", overrides + ["hydra.mode=RUN"], RunMode.RUN)
    calls = composition_calls(monkeypatch)
    made = run_compositions(monkeypatch)
    memo = loader()
    with hydras_own_composition() if hydras_config == "composed" else contextlib.nullcontext():
        mode = memo.load_configuration("config", list(overrides), RunMode.MULTIRUN, validate_sweep_overrides=False)
        assert mode.hydra.mode is None  # what Hydra.get_mode reads
        kept = memo.load_configuration("config", overrides + ["hydra.mode=RUN"], RunMode.RUN)
    assert (calls, made) == (([RunMode.RUN], []) if hydras_config == "composed" else ([], [None]))
    assert OmegaConf.to_yaml(kept) == OmegaConf.to_yaml(fresh)


def test_a_sweep_override_composes_as_hydra_does(monkeypatch):
    calls = composition_calls(monkeypatch)
    memo = loader()
    memo.load_configuration("config", ["module.lr=0.1,0.2"], RunMode.MULTIRUN, validate_sweep_overrides=False)
    assert calls == [RunMode.RUN, RunMode.MULTIRUN]  # the run's composition stops at its first check


def run_compositions(monkeypatch) -> list:
    """Item 10's compositions: None each time it composed (a config came back)."""
    made = []
    real = fast_composition._run_config_without_hydras_config

    def counted(*args):
        cfg = real(*args)
        made.append(None if cfg is not None else "Hydra's")
        return cfg

    monkeypatch.setattr(fast_composition, "_run_config_without_hydras_config", counted)
    return made


@pytest.mark.skipif(not kept_nodes_fit_this_installation(), reason=KEPT_NODES_REASON)
@pytest.mark.parametrize("overrides", [[], ["backend=megatron", "model=llama3_8b", "hydra.job.chdir=true"],
                                       ["platform=slurm", "task=plan"]])
def test_hydras_loader_gets_the_run_config_it_composes_without_composing_hydras_config(monkeypatch, overrides):
    from hydra.core.utils import JobRuntime

    monkeypatch.setattr(JobRuntime.instance(), "conf", OmegaConf.create({"name": "primus"}))
    with hydras_own_composition():
        hydras = loader().load_configuration("config", overrides, RunMode.RUN)
    calls = composition_calls(monkeypatch)
    made = run_compositions(monkeypatch)
    cfg = loader().load_configuration("config", overrides, RunMode.RUN)
    assert (calls, made) == ([], [None])
    assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(hydras) and nodes(cfg) == nodes(hydras)


def test_hydras_loader_composes_its_own_way_where_it_searches_more_than_this_projects_configs(monkeypatch, tmp_path):
    from hydra.core.config_search_path import SearchPathQuery

    search_path = create_config_search_path(find_conf_dir())
    search_path.prepend("command-line", f"file://{tmp_path}", anchor=SearchPathQuery(provider="schema"))  # as -cd
    calls = composition_calls(monkeypatch)
    made = run_compositions(monkeypatch)
    ConfigLoaderImpl(config_search_path=search_path).load_configuration("config", [], RunMode.RUN)
    assert (calls, made) == ([RunMode.RUN], ["Hydra's"])


def test_a_stored_node_loads_as_hydra_would_have_stored_it():
    from hydra.core.config_store import ConfigStore
    from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf, TPESamplerConfig
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    from primus_hydra.backends.schemas import BACKEND_SCHEMAS
    from primus_hydra.config.schema import PrimusConfig

    register_schemas()
    scan_plugins()
    store = ConfigStore.instance()
    for path, node in [("primus_schema.yaml", PrimusConfig), ("schema/backend/megatron.yaml", BACKEND_SCHEMAS["megatron"]),
                       ("hydra/sweeper/optuna.yaml", OptunaSweeperConf), ("hydra/sweeper/sampler/tpe.yaml", TPESamplerConfig),
                       ("hydra/launcher/submitit_slurm.yaml", SlurmQueueConf())]:
        first, second = store.load(path), store.load(path)
        assert first.node == OmegaConf.structured(node), path
        assert first.node is not second.node  # each load hands out its own copy, as Hydra's does
        OmegaConf.set_struct(first.node, False)
        first.node.extra = 1  # and changing it changes nothing stored
        assert "extra" not in store.load(path).node


def scan_plugins() -> None:
    from hydra.core.plugins import Plugins

    Plugins.instance()


def test_a_node_is_converted_when_first_loaded_not_when_stored():
    from dataclasses import dataclass

    from hydra.core.config_store import ConfigStore
    from omegaconf.errors import ValidationError

    @dataclass
    class Unconvertible:
        x: object = object()  # OmegaConf refuses this type

    store = ConfigStore.instance()
    store.store(group="test_lazy", name="bad", node=Unconvertible)  # Hydra's own store would raise here
    with pytest.raises(ValidationError):
        store.load("test_lazy/bad.yaml")
    del store.repo["test_lazy"]


def test_an_interpolation_is_parsed_once_and_a_bad_one_raises_every_time():
    import omegaconf.grammar_parser
    from omegaconf.errors import GrammarParseError

    parse = omegaconf.grammar_parser.parse
    assert parse("${a.b}/${now:%H}") is parse("${a.b}/${now:%H}")
    for _ in range(2):
        with pytest.raises(GrammarParseError):
            parse("${a.b")
    assert OmegaConf.create({"a": 2, "b": "${a}-${a}"}).b == "2-2"


TRICKY_VALUES = {"empty": "", "bool_like": ["yes", "no", "on", "True", "null", "~"], "numbers": ["1", "1e-8", ".inf", "0x1f"],
                 "long": "a path " * 30, "lines": "first\nsecond\n  indented\n", "unicode": "héllo — ünïcode ✓",
                 "specials": ["a: b", "# not a comment", " leading", "trailing ", "'quoted'", '"double"', "-", "[x]", "{y}",
                              "${model.name}", "%H-%M", "*star", "&anchor", "!tag", "|pipe", ">fold", "@at", "`tick`"],
                 "floats": [1e-8, 3.0e-3, float("inf"), -0.0], "ints": [0, -1, 2**40], "none": None, "nested": {"a": [{"b": []}]}}


@pytest.mark.parametrize("overrides", [[], ["backend=megatron", "model=llama3_8b"], ["backend=torchtitan", "model=moe_tiny"],
                                       ["task=plan", "platform=slurm"]])
def test_omegaconf_writes_a_composed_config_as_its_python_dumper_does(overrides):
    cfg = loader().load_configuration("config", overrides, RunMode.RUN)
    container = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    container["tricky"] = TRICKY_VALUES
    for sort_keys in (False, True):
        written = OmegaConf.to_yaml(OmegaConf.create(container), sort_keys=sort_keys)
        assert written == yaml.dump(container, default_flow_style=False, allow_unicode=True, sort_keys=sort_keys,
                                    Dumper=fast_omegaconf.python_omegaconf_dumper())


def test_the_c_safe_dumper_writes_what_safe_dump_writes():
    from primus_hydra.util.yaml_text import SAFE_DUMPER, dump_yaml, load_yaml

    assert issubclass(SAFE_DUMPER, yaml.CSafeDumper)  # resolving each scalar's tag once per text
    cfg = loader().load_configuration("config", ["backend=megatron", "model=llama3_8b"], RunMode.RUN)
    document = {"config": OmegaConf.to_container(cfg, resolve=False, enum_to_str=True), "tricky": TRICKY_VALUES}
    for options in ({}, {"sort_keys": False}, {"sort_keys": False, "default_flow_style": False}):
        assert dump_yaml(document, **options) == yaml.safe_dump(document, **options)
    assert load_yaml(dump_yaml(document)) == yaml.safe_load(yaml.safe_dump(document))


def test_help_lists_the_same_groups_and_options_with_one_repository(monkeypatch):
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
    from hydra.core.global_hydra import GlobalHydra

    register_schemas()
    GlobalHydra.instance().clear()
    search_path = create_automatic_config_search_path(None, None, find_conf_dir())
    app = Hydra.create_main_hydra2(task_name="primus", config_search_path=search_path)
    try:
        cfg = app.compose_config("config", ["backend=megatron"], run_mode=RunMode.RUN)
        made = []
        counted = app.config_loader._parse_overrides_and_create_caching_repo
        monkeypatch.setattr(app.config_loader, "_parse_overrides_and_create_caching_repo",
                            lambda *args: made.append(1) or counted(*args))
        once = app.get_help(cfg.hydra.help, cfg, get_args_parser(), resolve=False)
        repositories_once = len(made)
        as_hydra = Hydra.get_help.__wrapped__(app, cfg.hydra.help, cfg, get_args_parser(), resolve=False)
    finally:
        GlobalHydra.instance().clear()
    assert once == as_hydra and "backend: " in once and "model: " in once
    assert repositories_once == 1 and len(made) > 50  # Hydra's own makes one per listing


def test_a_backends_schema_module_is_imported_when_its_schema_is_first_asked_for():
    from hydra.core.config_store import ConfigStore

    from primus_hydra.backends.schemas import BACKEND_SCHEMAS, BackendSchemas

    schemas = BackendSchemas()
    assert {"torch", "megatron", "torchtitan"} <= set(schemas) and schemas._schemas == {}
    assert schemas["megatron"] is BACKEND_SCHEMAS["megatron"] and list(schemas._schemas) == ["megatron"]
    with pytest.raises(KeyError):
        schemas["no_such_backend"]
    register_schemas()
    stored = ConfigStore.instance().load("schema/backend/torchtitan.yaml").node
    assert stored == OmegaConf.structured(BACKEND_SCHEMAS["torchtitan"])


def test_a_file_loaded_again_is_its_first_reading_until_it_changes(tmp_path):
    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    (tmp_path / "group").mkdir()
    config = tmp_path / "group" / "option.yaml"
    config.write_text("# @package _global_\nsize: 1\nnested: {a: [1, 2]}\n")
    source = FileConfigSource(provider="test", path=str(tmp_path))
    readings = [source.load_config("group/option") for _ in range(3)]  # the third is a copy of the second
    for reading in readings:
        assert OmegaConf.to_container(reading.config) == {"size": 1, "nested": {"a": [1, 2]}}
        assert reading.header["package"] == "_global_"
    readings[2].config.nested.a.append(3)  # changing what was handed out changes nothing kept
    readings[2].header["package"] = "changed"
    again = source.load_config("group/option")
    assert OmegaConf.to_container(again.config) == {"size": 1, "nested": {"a": [1, 2]}}
    assert again.header["package"] == "_global_"
    config.write_text("# @package _global_\nsize: 2\nnested: {a: [1, 2]}\n")  # edited: same size, same inode
    assert source.load_config("group/option").config.size == 2


def test_a_schema_section_built_again_is_what_its_class_builds():
    from omegaconf import DictConfig

    from primus_hydra.config.job_composition import compose_job_config
    from primus_hydra.config.schema import ModelConfig

    built = [DictConfig(ModelConfig) for _ in range(4)]  # the third and fourth: copies of the second's nodes
    assert all(section == OmegaConf.structured(ModelConfig) for section in built)
    assert all(OmegaConf.get_type(section) is ModelConfig for section in built)
    register_schemas()
    composed = [compose_job_config(find_conf_dir(), "config", ["model=moe_tiny"]) for _ in range(3)]
    assert composed[0] == composed[2]
    # Hydra merges without copying nodes: a change to one composition's section must not reach the kept nodes
    composed[2].model.hybrid.linear_num_key_heads = 99
    assert compose_job_config(find_conf_dir(), "config", ["model=moe_tiny"]).model.hybrid.linear_num_key_heads != 99


def test_node_metadata_copies_as_the_generic_deep_copy_does():
    import copy

    from primus_hydra.config.job_composition import compose_job_config

    register_schemas()
    cfg = compose_job_config(find_conf_dir(), "config", ["backend=megatron", "model=llama3_8b"])

    metadata = [node._metadata for node in _nodes(cfg)]
    assert len(metadata) > 200
    for meta in metadata:
        copied, generic = copy.deepcopy(meta), copy._reconstruct(meta, {}, *meta.__reduce_ex__(4))
        assert copied == generic and type(copied) is type(generic) and copied.flags is not meta.flags
    meta = cfg.model._get_node("num_layers")._metadata
    meta.resolver_cache["oc.env"][("HOME",)] = ["cached"]  # a cached result: copied the generic way, deeply
    assert copy.deepcopy(meta).resolver_cache["oc.env"][("HOME",)] is not meta.resolver_cache["oc.env"][("HOME",)]


def test_omegaconfs_value_checks_answer_as_its_own_do():
    import importlib.util

    import omegaconf._utils as used
    from omegaconf import AnyNode, DictConfig, StringNode

    # OmegaConf's own functions: its _utils module executed again, apart (the one in use is left as it is)
    spec = importlib.util.spec_from_file_location("omegaconf._utils_as_shipped", used.__file__)
    own = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(own)
    assert used._is_none is not own._is_none  # the stand-ins are installed

    cfg = OmegaConf.create({"a": 1, "b": "${a}", "c": "???", "d": None, "e": {"f": "x${a}"}, "g": "${missing}"})
    values = [1, "???", "${a}", "x", None, "${", "$${a}", AnyNode(None), StringNode("???"), AnyNode("${a}"),
              DictConfig(None), *(cfg._get_node(key) for key in cfg)]
    unions = OmegaConf.structured(dataclasses.make_dataclass("Unions", [
        ("number", Union[int, str], 1), ("text", Union[int, str], "x"), ("none", Optional[Union[int, str]], None),
        ("interpolated", Union[int, str], "${number}"), ("missing", Union[int, str], "???")]))
    values += [unions._get_node(key) for key in unions]
    for value in values:
        assert used._is_missing_value(value) == own._is_missing_value(value)
        assert used._is_interpolation(value) == own._is_interpolation(value)
        assert used._is_none(value) == own._is_none(value)
        got, expected = used._get_value(value), own._get_value(value)
        assert got is expected or (type(got) is type(expected) and got == expected), (value, got, expected)
    for key in cfg:
        node = cfg._get_node(key)
        assert used._is_none(node, resolve=True, throw_on_resolution_failure=False) == \
            own._is_none(node, resolve=True, throw_on_resolution_failure=False)


def _node_states(node, path="cfg"):
    """(path, node type, value, own flags, flags cache, parent's path) of every node of a config, in order."""
    from omegaconf import Container, DictConfig, ListConfig

    yield path, type(node).__name__, None if isinstance(node, Container) else node._value(), \
        dict(node._metadata.flags), node.__dict__["_flags_cache"], node._metadata.key, node._metadata.optional
    content = node.__dict__.get("_content")
    if isinstance(node, DictConfig) and isinstance(content, dict):
        for key, child in content.items():
            assert child._get_parent() is node
            yield from _node_states(child, f"{path}.{key}")
    elif isinstance(node, ListConfig) and isinstance(content, list):
        for index, child in enumerate(content):
            yield from _node_states(child, f"{path}[{index}]")


@pytest.mark.parametrize("overrides", [[], ["backend=megatron", "model=llama3_8b"], ["backend=torchtitan",
                                                                                      "model=moe_tiny"]])
def test_value_nodes_made_directly_are_the_nodes_omegaconf_makes(monkeypatch, overrides):
    import omegaconf.omegaconf as omegaconf_module
    from omegaconf.nodes import ValueNode

    from primus_hydra.config.job_composition import compose_job_config

    fast_composition.install()
    register_schemas()
    text = "a: 1\nb: x${a}\nc: [1, 2.5, true, null, '???']\nd: {e: '${oc.env:HOME}', f: {g: str}}\n"
    fast = [compose_job_config(find_conf_dir(), "config", overrides), OmegaConf.create(text)]
    monkeypatch.setattr(ValueNode, "__init__", fast_omegaconf.SHIPPED["value_node_init"])
    monkeypatch.setattr(omegaconf_module, "_node_wrap", fast_omegaconf.SHIPPED["node_wrap"])
    shipped = [compose_job_config(find_conf_dir(), "config", overrides), OmegaConf.create(text)]
    for made_directly, made_by_omegaconf in zip(fast, shipped):
        assert list(_node_states(made_directly)) == list(_node_states(made_by_omegaconf))


@dataclasses.dataclass
class _Typed:
    count: int = 0


@pytest.mark.parametrize("make", [
    lambda: OmegaConf.create({"a": "${oc.env:"}),  # an interpolation the grammar refuses
    lambda: OmegaConf.structured(_Typed(count="many")),  # a value its type refuses
    lambda: OmegaConf.create({"a": object()}),  # a value OmegaConf does not hold
])
def test_a_value_node_refuses_what_omegaconf_refuses(monkeypatch, make):
    import omegaconf.omegaconf as omegaconf_module
    from omegaconf.nodes import ValueNode

    fast_composition.install()
    with pytest.raises(Exception) as made_directly:
        make()
    monkeypatch.setattr(ValueNode, "__init__", fast_omegaconf.SHIPPED["value_node_init"])
    monkeypatch.setattr(omegaconf_module, "_node_wrap", fast_omegaconf.SHIPPED["node_wrap"])
    with pytest.raises(Exception) as made_by_omegaconf:
        make()
    assert type(made_directly.value) is type(made_by_omegaconf.value)
    assert str(made_directly.value) == str(made_by_omegaconf.value)


def test_a_value_node_keeps_its_own_readonly_flag_and_is_made_under_a_readonly_parent():
    from omegaconf import AnyNode, IntegerNode

    fast_composition.install()
    frozen = OmegaConf.create({"a": {"b": 1}})
    OmegaConf.set_readonly(frozen, True)
    node = AnyNode(2, key="c", parent=frozen.a)
    assert node._value() == 2 and node._metadata.flags == {} and node._get_flag("readonly") is True
    own = IntegerNode("3", flags={"readonly": True})
    assert own._value() == 3 and own._metadata.flags == {"readonly": True}


@pytest.mark.parametrize("overrides", [["backend=megatron", "model=llama3_8b"], ["backend=torchtitan", "model=moe_tiny"]])
def test_a_config_copies_node_for_node_as_omegaconfs_own_copy(monkeypatch, overrides):
    import copy

    from primus_hydra.config.job_composition import compose_job_config

    fast_composition.install()
    register_schemas()
    cfg = compose_job_config(find_conf_dir(), "config", overrides)
    with open_dict(cfg):  # beside the schema's nodes: a list, `???`, None and interpolations in untyped nodes
        cfg.extra = OmegaConf.create({"listed": [1, "${model.num_layers}", {"x": None}], "missing": "???",
                                      "none": None, "path": "${module.lr}"})
    before = list(_node_states(cfg))
    copied = copy.deepcopy(cfg)
    for name, shipped in fast_omegaconf.SHIPPED.items():
        if name.endswith(".__deepcopy__"):
            monkeypatch.setattr(getattr(__import__("omegaconf"), name.split(".")[0]), "__deepcopy__", shipped)
    by_omegaconf = copy.deepcopy(cfg)
    assert list(_node_states(copied)) == list(_node_states(by_omegaconf)) == before
    assert all(set(node.__dict__) == set(twin.__dict__) for node, twin in zip(_nodes(copied), _nodes(by_omegaconf)))
    copied.model.num_layers = 3  # a copy shares no node with its original
    assert cfg.model.num_layers != 3 and copied.extra.listed[1] == 3 and cfg.extra.listed[1] != 3
    shared = cfg._get_node("model")  # a node the memo hands back as itself stays in its own tree
    assert copy.deepcopy(cfg, {id(shared): shared})._get_node("model") is shared and shared._get_parent() is cfg


def _nodes(node):
    from omegaconf import DictConfig, ListConfig

    yield node
    content = node.__dict__.get("_content")
    if isinstance(node, (DictConfig, ListConfig)) and isinstance(content, (dict, list)):
        for child in (content.values() if isinstance(content, dict) else content):
            yield from _nodes(child)


def test_a_defaults_list_gets_its_interpolation_map_only_when_an_entry_is_interpolated(monkeypatch, tmp_path):
    from hydra._internal import defaults_list

    for group, option, text in (("db", "mysql", "driver: mysql\n"), ("db", "sqlite", "driver: sqlite\n"),
                                ("schema", "mysql_v1", "tables: 3\n"), ("schema", "sqlite_v1", "tables: 1\n")):
        (tmp_path / group).mkdir(exist_ok=True)
        (tmp_path / group / f"{option}.yaml").write_text(text)
    (tmp_path / "config.yaml").write_text("defaults:\n  - db: mysql\n  - schema: ${db}_v1\n  - _self_\nname: app\n")
    (tmp_path / "plain.yaml").write_text("defaults:\n  - db: mysql\n  - _self_\nname: plain\n")

    def composed(config_name: str, overrides: list) -> str:
        made = ConfigLoaderImpl(config_search_path=create_config_search_path(str(tmp_path)))
        cfg = made.load_configuration(config_name, overrides, RunMode.RUN)
        with open_dict(cfg):
            del cfg.hydra.runtime  # its cwd and output dir
        return OmegaConf.to_yaml(cfg)

    cases = [("config", []), ("config", ["db=sqlite"]), ("plain", []), ("plain", ["db=sqlite"])]
    maps_made = []  # per defaults list: whether a map was made
    patched = defaults_list._create_interpolation_map

    def spied(*args):
        made = patched(*args)
        maps_made.append(made is not None)
        return made

    monkeypatch.setattr(defaults_list, "_create_interpolation_map", spied)
    fast = [composed(*case) for case in cases]
    assert "tables: 1" in fast[1] and "tables: 3" in fast[0]  # the interpolated entry followed the choice
    assert maps_made.count(True) == 2 and len(maps_made) > 2  # config.yaml's list, twice; Hydra's and plain's: none
    monkeypatch.setattr(defaults_list, "_create_interpolation_map", patched.__wrapped__)
    assert fast == [composed(*case) for case in cases]  # Hydra's own, with every map made


MERGES_OVER_INTERPOLATIONS = [
    ({"b": {"y": 2}, "a": "${b}"}, {"a": {"x": 1}}),  # one ${...} pointing at a dict: merged into
    ({"b": [1, 2], "a": "${b}"}, {"a": [3]}),
    ({"a": "outputs/${counted:}"}, {"a": "mine"}),  # text and an interpolation: replaced, never resolved
    ({"a": "${counted:}/runs"}, {"a": {"x": 1}}),
    ({"a": "${counted:}${counted:}"}, {"a": 5}),
    ({"a": "\\${counted:}"}, {"a": "escaped"}),
    ({"s": {"a": "${missing.key}/x"}}, {"s": {"a": 1}}),  # does not resolve: as OmegaConf's own
    ({"a": "${counted:}"}, {"a": "over a resolver's value"}),
]


@pytest.mark.parametrize("dest, src", MERGES_OVER_INTERPOLATIONS)
def test_a_merge_over_an_interpolation_is_omegaconfs_own_and_resolves_only_what_may_be_a_container(
        monkeypatch, dest, src):
    from omegaconf import Node

    calls = []
    OmegaConf.register_new_resolver("counted", lambda: calls.append(1) or "value", replace=True)
    try:
        fast = OmegaConf.merge(OmegaConf.create(dest), OmegaConf.create(src))
        fast_calls = len(calls)
        monkeypatch.setattr(Node, "_maybe_dereference_node", Node._maybe_dereference_node.__wrapped__)
        own = OmegaConf.merge(OmegaConf.create(dest), OmegaConf.create(src))
        own_calls = len(calls) - fast_calls
    finally:
        OmegaConf.clear_resolver("counted")
    assert OmegaConf.to_yaml(fast) == OmegaConf.to_yaml(own)
    overwritten = dest.get("a")
    whole = isinstance(overwritten, str) and overwritten.startswith("${") and overwritten.endswith("}")
    assert fast_calls == (own_calls if whole else 0)  # text around an interpolation: not resolved
    if "counted" in str(dest) and not overwritten.startswith("\\"):  # an escaped one is no interpolation
        assert own_calls > 0  # OmegaConf's own merge resolves it


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass
class Typed:
    a: int = 1
    nested: dict = dataclasses.field(default_factory=lambda: {"x": 1})


@dataclasses.dataclass
class Holder:
    none: Optional[Typed] = None  # a dict node whose content is None
    by_enum: dict[Color, int] = dataclasses.field(default_factory=lambda: {Color.RED: 1})


def _nodes_to_read() -> dict:
    values = {"a": 1, "b": "???", "c": "${a}", "d": None, "e": {"f": 2}}
    struct = OmegaConf.create(values)
    OmegaConf.set_struct(struct, True)
    holder = OmegaConf.structured(Holder)
    return {"plain": OmegaConf.create(values), "struct": struct, "typed": OmegaConf.structured(Typed),
            "int keys": OmegaConf.create({1: "one"}), "enum keys": holder.by_enum, "none": holder._get_node("none")}


READS = [("a", {}), ("b", {}), ("b", {"throw_on_missing_value": True}), ("c", {}), ("d", {}), ("e", {}),
         ("absent", {}), ("absent", {"validate_access": False}), ("absent", {"throw_on_missing_key": True}),
         ("1", {}), (1, {}), ("RED", {}), (Color.RED, {}), ("nested", {}), ("", {})]


def _outcome(get_node, node, key, flags):
    try:
        return "node", get_node(node, key, **flags)
    except Exception as error:  # noqa: BLE001 - the error is the outcome compared
        return type(error).__name__, str(error)


@pytest.mark.parametrize("kind", ["plain", "struct", "typed", "int keys", "enum keys", "none"])
def test_a_held_key_is_read_as_omegaconf_reads_it_and_any_other_read_is_omegaconfs_own(kind):
    from omegaconf import DictConfig

    fast_omegaconf.install()
    fast, own = DictConfig._get_node, DictConfig._get_node.__wrapped__
    node = _nodes_to_read()[kind]
    for key, flags in READS:
        got, expected = _outcome(fast, node, key, flags), _outcome(own, node, key, flags)
        assert got[0] == expected[0], (kind, key, flags, got, expected)
        assert got[1] is expected[1] if got[0] == "node" else got[1] == expected[1], (kind, key, flags)


def _to_container_outcome(to_content, node, flags):
    from omegaconf.basecontainer import BaseContainer

    own = BaseContainer._to_content
    BaseContainer._to_content = staticmethod(to_content)  # nested containers are read the same way
    try:
        return "value", OmegaConf.to_container(node, **flags)
    except Exception as error:  # noqa: BLE001 - the error is the outcome compared
        return type(error).__name__, str(error)
    finally:
        BaseContainer._to_content = own


@pytest.mark.parametrize("flags", [{}, {"resolve": True}, {"throw_on_missing": True},
                                   {"resolve": True, "enum_to_str": True}, {"resolve": True, "throw_on_missing": True},
                                   {"structured_config_mode": __import__("omegaconf").SCMode.DICT_CONFIG}])
def test_a_config_made_plain_is_what_omegaconf_makes_of_it(flags):
    from omegaconf.basecontainer import BaseContainer

    from primus_hydra.config.job_composition import compose_job_config

    fast_composition.install()
    register_schemas()
    fast, own = BaseContainer._to_content, BaseContainer._to_content.__wrapped__
    composed = compose_job_config(find_conf_dir(), "config", ["backend=megatron", "model=llama3_8b"])
    with open_dict(composed):  # beside the schema's: interpolations to values and containers, `???`, None, enums,
        composed.extra = OmegaConf.create({  # escaped text, lists of dicts
            "listed": [1, "${model.num_layers}", {"x": None, "y": "${extra.nested}"}, "???"],
            "nested": {"a": "${module.lr}", "b": "text ${model.num_layers} text", "c": "\\${not.one}"},
            "whole": "${extra.nested}", "none": None, "enum": Color.RED, "path": "${oc.env:HOME}"})
    holder = OmegaConf.structured(Holder)
    broken = OmegaConf.create({"a": "${no.such.key}", "b": [1, "${nope}"]})
    missing = OmegaConf.create({"a": {"b": "???"}, "c": ["???"]})
    for node in (composed, holder, holder.by_enum, broken, missing, OmegaConf.create([1, {"a": 2}, [3]]),
                 OmegaConf.create({"x": "${y}", "y": {"z": 1}}).x if flags.get("resolve") else missing):
        assert _to_container_outcome(fast, node, flags) == _to_container_outcome(own, node, flags)
    assert OmegaConf.to_container(composed, resolve=True)["extra"]["nested"]["c"] == "${not.one}"


PLAIN_OVERRIDES = [
    "model=llama3_8b", "module.lr=1e-3", "module.lr=2.5E-4", "module.lr=.5", "module.lr=1.", "module.lr=1.e5",
    "a.b=-3", "a.b=1_000", "a.b=1__0", "a.b=1_", "a.b=00", "a.b=0x10", "a.b=-0", "a.b=1_0.5", "a.b=1.2.3", "a.b=1e",
    "a.b=inf", "a.b=-INF", "a.b=NaN", "a.b=nan5", "a.b=infinity", "a.b=True", "a.b=fAlSe", "a.b=true1", "a.b=-true",
    "a.b=NULL", "a.b=null_", "a.b=/tmp/run-1/x.y", "a.b=.", "a.b=-", "a.b=_", "a.b=3b", "hydra/launcher=primus_local",
    "+module.extra_args.new_key=1", "++a.b=x", "~logger", "~a.b", "~a.b=3", "module.layers.0.x=1", "a-b.c_d-e=f",
    "task.dry_run=true", "hydra.run.dir=outputs/x", "hydra.mode=RUN",
    # not plain: Hydra's own parse (and its error)
    "a.b=", "a.b=x y", "a.b='q'", "a.b=${x}", "a.b=1,2", "a.b=[1,2]", "a.b=choice(1,2)", "a.b=1e+3", "model@pkg=x",
    "a.01=1", "1=2", "=x", "a..b=1", "a/b.c=1", "a.b=c=d", "+~a=1", "a.b=x\\ y",
]


def _parsed(parse_rule, text):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        override = parse_rule(OverridesParser.create(), text, "override")
    except Exception as error:  # noqa: BLE001 - the error is the outcome compared
        return type(error).__name__, str(error)
    value = override._value
    return (override.type, override.key_or_group, override.package, override.value_type, override.input_line,
            type(value), repr(value), override.config_loader)


def test_a_plain_override_is_read_into_the_override_hydras_grammar_parses():
    import random

    from hydra.core.override_parser.overrides_parser import OverridesParser

    fast_composition.install()
    fast, own = OverridesParser.parse_rule, OverridesParser.parse_rule.__wrapped__
    alphabet = "aZ_09-./eE+1nN"
    random.seed(30)
    generated = [f"k.x={''.join(random.choice(alphabet) for _ in range(random.randint(1, 6)))}" for _ in range(3000)]
    plain = 0
    for text in PLAIN_OVERRIDES + generated:
        plain += fast_composition.plain_override(text) is not None
        assert _parsed(fast, text) == _parsed(own, text), text
    assert plain > 2000  # most generated ones take the plain path
    assert fast_composition.plain_override("a.b=x y") is None and fast_composition.plain_override("model=x") is not None


def test_version_strings_are_read_once_with_the_same_answers():
    from hydra import version
    from packaging.version import Version

    fast_composition.install()
    before = version.getbase()
    try:
        for base in ("1.2", "1.3"):
            version.setbase(base)
            for asked in ("1.1", "1.2", "1.2.0.dev2", "1.3", "1.4"):
                expected = Version(base) >= Version(".".join(asked.split(".")[:2]))
                assert version.base_at_least(asked) is expected, (base, asked)
        assert version._get_version("1.2.0.dev2") is version._get_version("1.2.0.dev2") == Version("1.2")
    finally:
        version.VersionBase.instance().version_base = before
