"""Three changes to how Hydra 1.3 and OmegaConf 2.3 compose a config, for speed only: the composed config is the same.

1. YAML is parsed by libyaml's C parser (`yaml.CSafeLoader`) under OmegaConf's own rules: its resolvers (the wider
   float rule, no timestamps), its constructors and its refusal of a key written twice. OmegaConf parses with the
   pure-Python loader and builds a new loader class for every file; composing this project's config reads ~60
   files, which took ~45 ms of ~130 (scripts/bench/bench_cfg_print.py). A file libyaml refuses is read again by
   OmegaConf's loader, so that its error is worded as before. Where libyaml is missing nothing changes.
2. Hydra's command line composes a run's config twice: once to read `hydra.mode` (Hydra.get_mode, as for a
   multirun, sweep overrides allowed) and once to run it. When no override is a sweep, the run's composition
   gives get_mode the same `hydra.mode`, so it is made first and kept for the run it was made for (the same config
   name and overrides, once, with the `hydra.mode=RUN` Hydra then adds applied as Hydra applies it). Where it fails
   (a sweep override, a missing default), get_mode composes as before.

3. Every composition deep-copies Hydra's config repository (CachingConfigRepository, so that initializing its
   sources does not change the original), and with it the ConfigStore singleton: every structured config every
   installed plugin and this project registered (~35 ms a composition). A copy of the ConfigStore is the ConfigStore
   itself now; nothing changes it while composing, and ConfigStore.load hands out a copy of each node it loads.

4. ConfigStore.store converts each node to OmegaConf when it is stored: every structured config every installed
   plugin registers at Hydra's plugin scan (Optuna's sweeper and samplers, submitit's and joblib's launchers) and
   this project's schemas (~25-35 ms a process), most of which no command loads. A node stored after install() is
   converted when it is first loaded, once; what a load returns is the same.

5. OmegaConf parses an interpolation (`${...}`) with its ANTLR grammar (~1 ms a string in pure Python) each time
   it meets it: when a node is made, merged into or resolved. Composing this project's config parses the same ~10
   strings 17-35 times. The parse tree of a string is kept (it is read, never changed, by OmegaConf's visitor).

6. OmegaConf writes YAML (`OmegaConf.to_yaml`, `OmegaConf.save`: `--cfg`, Hydra's .hydra/*.yaml of a run) with
   PyYAML's pure-Python emitter, ~25 ms for this project's config; libyaml's emitter writes the same text, with
   OmegaConf's own representer (strings that would read back as another type are quoted).

7. `--help` lists every config group twice (Hydra's and the application's), asking for each group's options with
   a new config repository each time (~120 repositories, ~0.15 s for this project's tree). While the help text is
   made, one repository answers and each listing is made once.

8. A config file Hydra loads a second time in one process (task=import's ~100 compositions, the points of a sweep
   Hydra composes in this process) is a copy of its first reading (~3x faster than OmegaConf's load): kept by its
   real path, inode, size, and modification and change times, so that an edited file is read again.

9. Merging a group's config into its typed section (`model: ModelConfig = MISSING`) builds the section from its
   dataclass first (OmegaConf's `expand`: ~11 ms for ModelConfig, ~9 for ModuleConfig, every composition). A class
   of this project's built a second time in one process is a copy of its second build (~3x faster): the nodes a
   dataclass makes depend only on the class (its defaults and default factories are constants).

10. Every deep copy of a config (Hydra copies each loaded config and each node it sets; task=import copies a composed
   config per experiment) copies each node's metadata through `copy`'s generic reduce-and-rebuild path, half of the
   copy's time. Metadata whose fields are types, flags and plain keys, with no resolver results cached, is copied
   field by field instead (a new flags dict, a new empty cache, the same immutable values); any other goes the
   generic way.

Not for speed: every composition ends with `model.from_hf=<DIR>` applied (config/hf_config.py), so that the
command line, `--cfg job`, the Python API and each sweep point Hydra composes see the folder's architecture.

`install()` is idempotent; the command line, the Python API and task=import call it before they compose.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import yaml
from omegaconf._utils import get_omega_conf_dumper as omegaconfs_get_omega_conf_dumper  # kept: install() replaces it
from omegaconf._utils import get_yaml_loader as omegaconfs_get_yaml_loader  # kept: install() replaces it

_INSTALLED = False
RUN_MODE_OVERRIDE = "hydra.mode=RUN"  # what Hydra's _run_app adds for a run when the config sets no mode


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    _install_c_yaml_loader()
    _convert_stored_nodes_when_loaded()
    _keep_interpolation_parse_trees()
    _install_c_yaml_dumper()
    _keep_files_loaded_twice()
    _keep_schema_sections_built_twice()
    _copy_node_metadata_field_by_field()
    _list_config_groups_once_per_help()
    _install_model_from_hf()  # first: the composition kept for the run below has it applied already
    _install_one_composition_per_run()
    _share_the_config_store()


def _install_c_yaml_loader() -> None:
    if not hasattr(yaml, "CSafeLoader"):
        return
    import omegaconf._utils as omegaconf_utils
    import omegaconf.basecontainer as basecontainer

    python_loader = python_yaml_loader()

    class OmegaConfCLoader(yaml.CSafeLoader):
        def __init__(self, stream: Any) -> None:
            self._stream = stream
            super().__init__(stream)

        def get_single_data(self) -> Any:
            try:
                return super().get_single_data()
            except yaml.YAMLError:  # libyaml words its errors its own way: read the file again as OmegaConf
                if hasattr(self._stream, "read") and not self._stream.seekable():  # would, for its message
                    raise
                if hasattr(self._stream, "seek"):
                    self._stream.seek(0)
                loader = python_loader(self._stream)
                try:
                    return loader.get_single_data()
                finally:
                    loader.dispose()

    # OmegaConf's construct_mapping calls super() of its Python class: the C class gets the same check
    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        keys = set()
        for key_node, _ in node.value:
            if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                continue
            if key_node.value in keys:
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"found duplicate key {key_node.value}", key_node.start_mark)
            keys.add(key_node.value)
        return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)

    OmegaConfCLoader.construct_mapping = construct_mapping
    OmegaConfCLoader.yaml_implicit_resolvers = python_loader.yaml_implicit_resolvers
    OmegaConfCLoader.yaml_constructors = python_loader.yaml_constructors

    def get_yaml_loader() -> Any:
        return OmegaConfCLoader

    omegaconf_utils.get_yaml_loader = get_yaml_loader
    basecontainer.get_yaml_loader = get_yaml_loader


def _share_the_config_store() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.__deepcopy__ = lambda self, memo: self


ConfigNodeConvertedWhenLoaded: Optional[type] = None  # set once ConfigStore.store converts when a node is loaded


class _Deferred:
    """A node made when it is loaded (stored_when_loaded)."""
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def stored_when_loaded(make: Callable[[], Any]) -> Any:
    """For ConfigStore.store: a node (a dataclass, say, whose module is costly to import) made by `make()` when
    composition first loads it; made now where install() has not run (Hydra's own store converts at once)."""
    return _Deferred(make) if ConfigNodeConvertedWhenLoaded is not None else make()


class _Conversion:
    """A stored node and, once asked for, its OmegaConf form; shared by the copies ConfigStore.load makes."""
    __slots__ = ("stored", "converted")

    def __init__(self, stored: Any) -> None:
        self.stored, self.converted = stored, None

    def config(self) -> Any:
        if self.converted is None:
            from omegaconf import OmegaConf

            stored = self.stored.make() if isinstance(self.stored, _Deferred) else self.stored
            self.converted, self.stored = OmegaConf.structured(stored), None
        return self.converted

    def __deepcopy__(self, memo: dict) -> "_Conversion":
        return self


def _convert_stored_nodes_when_loaded() -> None:
    from hydra.core.config_store import ConfigNode, ConfigStore

    class ConvertedWhenLoaded(ConfigNode):  # ConfigNode's fields and constructor; `node` made when first read
        @property
        def node(self) -> Any:
            own = self.__dict__.get("_own_node")
            return own if own is not None else self.__dict__["_conversion"].config()

        @node.setter
        def node(self, value: Any) -> None:  # ConfigNode's constructor gives the conversion, load() a copy
            if isinstance(value, _Conversion):
                self.__dict__["_conversion"], self.__dict__["_own_node"] = value, None
            else:
                self.__dict__["_own_node"] = value

    def store(self: ConfigStore, name: str, node: Any, group: Optional[str] = None, package: Optional[str] = None,
              provider: Optional[str] = None) -> None:
        folder = self.repo
        for part in group.split("/") if group is not None else ():
            folder = folder.setdefault(part, {})
        name = name if name.endswith(".yaml") else f"{name}.yaml"
        folder[name] = ConvertedWhenLoaded(name=name, node=_Conversion(node), group=group, package=package,
                                           provider=provider)

    global ConfigNodeConvertedWhenLoaded
    ConfigStore.store, ConfigNodeConvertedWhenLoaded = store, ConvertedWhenLoaded


FILES_KEPT = 1024


def _keep_files_loaded_twice() -> None:
    import copy
    import os

    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra.plugins.config_source import ConfigResult

    load = FileConfigSource.load_config
    seen: set[tuple] = set()
    kept: dict[tuple, tuple[Any, dict]] = {}  # file version -> (its config, never handed out; its header)

    def load_config(self: FileConfigSource, config_path: str) -> ConfigResult:
        full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        try:
            stat = os.stat(full_path)
        except OSError:
            return load(self, config_path)  # as Hydra words it
        version = (full_path, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        if version in kept:
            config, header = kept[version]
            return ConfigResult(config=copy.deepcopy(config), path=f"{self.scheme()}://{self.path}",
                                provider=self.provider, header=dict(header))
        result = load(self, config_path)
        if version in seen:  # a second reading: a file read once per process (a command line's) costs no copy
            if len(kept) >= FILES_KEPT:
                kept.clear()
            kept[version] = (copy.deepcopy(result.config), dict(result.header))
        else:
            if len(seen) >= FILES_KEPT:
                seen.clear()
            seen.add(version)
        return result

    FileConfigSource.load_config = load_config


def _keep_schema_sections_built_twice() -> None:
    import copy

    import omegaconf._utils as omegaconf_utils
    import omegaconf.basecontainer as basecontainer
    import omegaconf.dictconfig as dictconfig

    build = omegaconf_utils.get_structured_config_data
    seen: set[tuple] = set()
    kept: dict[tuple, dict] = {}  # (class, allow_objects) -> its nodes, never handed out

    def get_structured_config_data(obj: Any, allow_objects: Optional[bool] = None) -> Any:
        if not isinstance(obj, type) or not obj.__module__.startswith("primus_hydra."):
            return build(obj, allow_objects=allow_objects)
        key = (obj, allow_objects)
        if key not in kept:
            if key not in seen:  # built once per process (a command line's composition): no copy kept
                seen.add(key)
                return build(obj, allow_objects=allow_objects)
            kept[key] = build(obj, allow_objects=allow_objects)
        return {name: copy.deepcopy(node) for name, node in kept[key].items()}

    for module in (omegaconf_utils, basecontainer, dictconfig):
        module.get_structured_config_data = get_structured_config_data


def _copy_node_metadata_field_by_field() -> None:
    import collections
    import copy
    import dataclasses
    import enum

    from omegaconf.base import ContainerMetadata, Metadata

    plain_keys = (str, int, float, bool, bytes, type(None), enum.Enum)
    fields = {cls: frozenset(field.name for field in dataclasses.fields(cls)) for cls in (Metadata, ContainerMetadata)}

    def deepcopy_metadata(self: Metadata, memo: dict) -> Metadata:
        state = self.__dict__
        if type(self) not in fields or state.keys() != fields[type(self)] or self.resolver_cache \
                or not isinstance(self.key, plain_keys) \
                or (self.flags and any(value is not None and type(value) is not bool for value in self.flags.values())):
            copied = copy._reconstruct(self, memo, *self.__reduce_ex__(4))  # what copy.deepcopy does without this
        else:
            copied = object.__new__(type(self))
            copied.__dict__.update(state)
            copied.__dict__["flags"] = dict(self.flags) if self.flags is not None else None
            copied.__dict__["resolver_cache"] = collections.defaultdict(dict)
        memo[id(self)] = copied
        return copied

    Metadata.__deepcopy__ = deepcopy_metadata  # ContainerMetadata inherits it


def _install_c_yaml_dumper() -> None:
    if not hasattr(yaml, "CDumper"):
        return
    import omegaconf._utils as omegaconf_utils
    import omegaconf.omegaconf as omegaconf_module

    python_dumper = python_omegaconf_dumper()

    class OmegaConfCDumper(yaml.CDumper):  # OmegaConf's Dumper is PyYAML's full Dumper: the same, in C
        pass

    OmegaConfCDumper.yaml_representers = dict(python_dumper.yaml_representers)
    OmegaConfCDumper.yaml_multi_representers = dict(python_dumper.yaml_multi_representers)

    def get_omega_conf_dumper() -> Any:
        return OmegaConfCDumper

    omegaconf_utils.get_omega_conf_dumper = get_omega_conf_dumper
    omegaconf_module.get_omega_conf_dumper = get_omega_conf_dumper


def python_omegaconf_dumper() -> Any:
    """OmegaConf's own (pure-Python) dumper class, as it builds it."""
    return omegaconfs_get_omega_conf_dumper()


HELP_LISTING = ("_parse_overrides_and_create_caching_repo", "get_group_options")  # the loader's, while help is made


def _list_config_groups_once_per_help() -> None:
    from hydra._internal.hydra import Hydra

    get_help = Hydra.get_help

    def get_help_listing_once(self: Hydra, *args: Any, **kwargs: Any) -> Any:
        loader = self.config_loader
        repositories: dict[tuple, Any] = {}
        listings: dict[tuple, list] = {}
        make_repository, list_options = loader._parse_overrides_and_create_caching_repo, loader.get_group_options

        def repository(config_name: Optional[str], overrides: list) -> Any:
            key = (config_name, tuple(overrides))
            if key not in repositories:
                repositories[key] = make_repository(config_name, overrides)
            return repositories[key]

        def get_group_options(group_name: str, *args: Any, **kwargs: Any) -> list:
            key = (group_name, args, tuple(sorted((name, str(value)) for name, value in kwargs.items())))
            if key not in listings:
                listings[key] = list_options(group_name, *args, **kwargs)
            return list(listings[key])

        # for this call only: the loader lists what it has now, and a later help lists again
        own = {name: vars(loader)[name] for name in HELP_LISTING if name in vars(loader)}
        vars(loader).update(zip(HELP_LISTING, (repository, get_group_options)))
        try:
            return get_help(self, *args, **kwargs)
        finally:
            for name in HELP_LISTING:
                vars(loader).pop(name)
            vars(loader).update(own)

    get_help_listing_once.__wrapped__ = get_help
    Hydra.get_help = get_help_listing_once


PARSE_TREES_KEPT = 1024


def _keep_interpolation_parse_trees() -> None:
    import omegaconf._utils
    import omegaconf.base
    import omegaconf.grammar_parser
    import omegaconf.resolvers.oc

    parse = omegaconf.grammar_parser.parse
    trees: dict[tuple, Any] = {}

    def parse_once(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE") -> Any:
        key = (value, parser_rule, lexer_mode)
        tree = trees.get(key)
        if tree is None:
            tree = parse(value, parser_rule, lexer_mode)  # a string the grammar refuses raises, every time
            if len(trees) >= PARSE_TREES_KEPT:
                trees.clear()
            trees[key] = tree
        return tree

    for module in (omegaconf.grammar_parser, omegaconf._utils, omegaconf.base, omegaconf.resolvers.oc):
        module.parse = parse_once


def python_yaml_loader() -> Any:
    """OmegaConf's own (pure-Python) loader class, as it builds it."""
    return omegaconfs_get_yaml_loader()


def _install_model_from_hf() -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from primus_hydra.config.hf_config import apply_model_from_hf

    compose = ConfigLoaderImpl.load_configuration

    def load_configuration(self, config_name: Optional[str], overrides: list, *args: Any, **kwargs: Any) -> Any:
        cfg = compose(self, config_name, overrides, *args, **kwargs)
        apply_model_from_hf(cfg, overrides)
        return cfg

    ConfigLoaderImpl.load_configuration = load_configuration


def _install_one_composition_per_run() -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.types import RunMode

    compose = ConfigLoaderImpl.load_configuration
    kept: dict[tuple, Any] = {}

    def load_configuration(self, config_name: Optional[str], overrides: list, run_mode: RunMode,
                           from_shell: bool = True, validate_sweep_overrides: bool = True) -> Any:
        key = (id(self), config_name, tuple(overrides), from_shell)
        if run_mode == RunMode.MULTIRUN and not validate_sweep_overrides:  # Hydra.get_mode
            kept.clear()
            try:
                kept[key] = compose(self, config_name, overrides, RunMode.RUN, from_shell, True)
                return kept[key]
            except Exception:  # noqa: BLE001 - a sweep, or what a multirun may skip: compose as Hydra does
                pass
        elif run_mode == RunMode.RUN and validate_sweep_overrides and key in kept:
            return kept.pop(key)  # the config sets hydra.mode itself
        elif run_mode == RunMode.RUN and validate_sweep_overrides and overrides[-1:] == [RUN_MODE_OVERRIDE] \
                and key[:2] + (tuple(overrides[:-1]),) + key[3:] in kept:
            cfg = kept.pop(key[:2] + (tuple(overrides[:-1]),) + key[3:])
            if cfg.hydra.mode is None:  # what the override Hydra added for the run does to a composed config
                cfg.hydra.mode = RunMode.RUN
                cfg.hydra.overrides.hydra.append(RUN_MODE_OVERRIDE)
                return cfg
        return compose(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

    ConfigLoaderImpl.load_configuration = load_configuration
