"""Changes to how Hydra 1.3 composes a config, for speed only: the composed config is the same. OmegaConf's own
(YAML, interpolations, schema sections, copies) are config/fast_omegaconf.py's, which install() installs first.

1. Hydra's command line composes a run's config twice: once to read `hydra.mode` (Hydra.get_mode, as for a
   multirun, sweep overrides allowed) and once to run it. When no override is a sweep, the run's composition
   gives get_mode the same `hydra.mode`, so it is made first and kept for the run it was made for (the same config
   name and overrides, once, with the `hydra.mode=RUN` Hydra then adds applied as Hydra applies it). Where it fails
   (a sweep override, a missing default), get_mode composes as before.

2. Every composition deep-copies Hydra's config repository (CachingConfigRepository, so that initializing its
   sources does not change the original), and with it the ConfigStore singleton: every structured config every
   installed plugin and this project registered (~35 ms a composition). A copy of the ConfigStore is the ConfigStore
   itself now; nothing changes it while composing, and ConfigStore.load hands out a copy of each node it loads.

3. ConfigStore.store converts each node to OmegaConf when it is stored: every structured config every installed
   plugin registers at Hydra's plugin scan (Optuna's sweeper and samplers, submitit's and joblib's launchers) and
   this project's schemas (~25-35 ms a process), most of which no command loads. A node stored after install() is
   converted when it is first loaded, once; what a load returns is the same (config/stored_nodes.py).

4. `--help` lists every config group twice (Hydra's and the application's), asking for each group's options with
   a new config repository each time (~120 repositories, ~0.15 s for this project's tree). While the help text is
   made, one repository answers and each listing is made once.

5. A config file Hydra loads a second time in one process (task=import's ~100 compositions, the points of a sweep
   Hydra composes in this process) is a copy of its first reading (~3x faster than OmegaConf's load): kept by its
   real path, inode, size, and modification and change times, so that an edited file is read again.

6. For every config with a defaults list, the defaults tree builds an OmegaConf node of the known choices and the
   list's entries (~0.4 ms each, ~25 a composition), which only an interpolated entry (`- db: ${platform}`) reads.
   A list without one gets no node (None: nothing reads it).

7. Hydra's plugin scan imports every hydra_plugins module, whose config dataclasses (Optuna's sweeper and samplers,
   submitit's and joblib's launchers, this project's: ~16) the dataclass decorator compiles, ~0.5 ms each, before any
   command that scans (a run, a dry run, compose(), --help) answers. The scan runs with Hydra's dataclasses made
   without compiling (config/hydra_dataclasses.py).

8. Hydra parses each command-line override with its ANTLR grammar, whose first parse in a process builds the
   lexer's and parser's decision tables (~3.5 ms a command). An override of the plain form `key=value`, `+key=value`,
   `++key=value` or `~key[=value]` (a dotted key or a group path; a value of letters, digits and `_ . - /`, no space)
   is read into the same Override with the grammar's own token rules (its INT, FLOAT, BOOL and NULL; any other value
   is the text); every other override is Hydra's to parse, and to word the error of.

9. Hydra asks `version.base_at_least("1.2")` ~200 times a composition (each config's defaults, each override),
   each time reading the version string with packaging's parser, twice (~1.5 ms). Each string is read once.

10. Hydra's own composition of a single run's config (`--help`, `--info`, `--cfg hydra|all`, `--resolve`, a run with
   a flag) composes Hydra's config too (~10 configs, a typed schema) after the job's. Where the loader searches only
   this project's conf/ (besides Hydra's own configs and the structured configs) it is config/run_composition.py's:
   the job's config and the `hydra` node kept from Hydra's composition, with Hydra's finishing steps, node for node
   what Hydra composes (~20 ms less for `--help` on a host where `import hydra` takes 0.42 s). Anything else, and
   whatever run_composition leaves to Hydra, composes as before.

Not for speed: every composition ends with `model.from_hf=<DIR>` applied (config/hf_config.py), so that the
command line, `--cfg job`, the Python API and each sweep point Hydra composes see the folder's architecture.

`install()` is idempotent; the command line, the Python API and task=import call it before they compose.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from primus_hydra.config import fast_omegaconf
from primus_hydra.config.hydra_dataclasses import hydra_dataclasses_made_without_compiling
from primus_hydra.config.stored_nodes import convert_stored_nodes_when_loaded

_INSTALLED = False


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    fast_omegaconf.install()
    convert_stored_nodes_when_loaded()
    _keep_files_loaded_twice()
    _list_config_groups_once_per_help()
    _install_model_from_hf()  # first: the composition kept for the run below has it applied already
    _install_run_composition_without_hydras_config()
    _install_one_composition_per_run()
    _share_the_config_store()
    _interpolation_map_only_for_interpolated_defaults()
    _plugin_dataclasses_made_without_compiling()
    _plain_overrides_read_without_the_grammar()
    _version_strings_read_once()


def _version_strings_read_once() -> None:
    import functools

    from hydra import version

    version._get_version = functools.lru_cache(maxsize=None)(version._get_version)  # a Version is immutable


def _share_the_config_store() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.__deepcopy__ = lambda self, memo: self


def _interpolation_map_only_for_interpolated_defaults() -> None:
    from hydra._internal import defaults_list

    make_map = defaults_list._create_interpolation_map

    def interpolation_map(overrides: Any, defaults: list, self_added: bool) -> Any:
        # read only by an entry that is an interpolation (_create_defaults_tree_impl's deferred children)
        if any(default.is_interpolation() for default in defaults):
            return make_map(overrides, defaults, self_added)
        return None

    interpolation_map.__wrapped__ = make_map
    defaults_list._create_interpolation_map = interpolation_map


def _plugin_dataclasses_made_without_compiling() -> None:
    from hydra.core.plugins import Plugins

    scan = Plugins._scan_all_plugins

    def scan_all_plugins(modules: list) -> Any:
        with hydra_dataclasses_made_without_compiling():
            return scan(modules)

    scan_all_plugins.__wrapped__ = scan
    Plugins._scan_all_plugins = staticmethod(scan_all_plugins)


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


def _install_model_from_hf() -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from primus_hydra.config.hf_config import apply_model_from_hf

    compose = ConfigLoaderImpl.load_configuration

    def load_configuration(self, config_name: Optional[str], overrides: list, *args: Any, **kwargs: Any) -> Any:
        cfg = compose(self, config_name, overrides, *args, **kwargs)
        apply_model_from_hf(cfg, overrides)
        return cfg

    ConfigLoaderImpl.load_configuration = load_configuration


SEARCH_PATH_PROVIDERS = frozenset({"hydra", "main", "schema"})  # Hydra's own configs, the primary folder, structured


def _install_run_composition_without_hydras_config() -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.types import RunMode

    compose = ConfigLoaderImpl.load_configuration

    def load_configuration(self, config_name: Optional[str], overrides: list, run_mode: RunMode,
                           from_shell: bool = True, validate_sweep_overrides: bool = True) -> Any:
        if run_mode == RunMode.RUN and validate_sweep_overrides and config_name is not None:
            cfg = _run_config_without_hydras_config(self.config_search_path, config_name, overrides)
            if cfg is not None:
                return cfg
        return compose(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

    load_configuration.__wrapped__ = compose
    ConfigLoaderImpl.load_configuration = load_configuration


def _run_config_without_hydras_config(search_path: Any, config_name: str, overrides: list) -> Any:
    """Item 10: the run's config by config/run_composition.py where the search path is Hydra's own configs, one
    primary folder and the structured configs; else None."""
    from hydra.core.utils import JobRuntime

    from primus_hydra.config.run_composition import compose_run_config

    elements = search_path.get_path()
    primary = [element.path for element in elements if element.provider == "main"]
    if len(primary) != 1 or any(element.provider not in SEARCH_PATH_PROVIDERS for element in elements):
        return None
    try:
        job_name = JobRuntime.instance().get("name")
    except KeyError:
        return None
    return compose_run_config(primary[0], config_name, list(overrides), job_name=job_name)


def _install_one_composition_per_run() -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.types import RunMode

    from primus_hydra.config.run_composition import RUN_MODE_OVERRIDE

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


_ID = r"[A-Za-z_][A-Za-z0-9_\-]*"
_INT_UNSIGNED = r"(?:0|[1-9](?:_?[0-9])*)"
_POINT_FLOAT = rf"(?:{_INT_UNSIGNED}\.|{_INT_UNSIGNED}?\.[0-9](?:_?[0-9])*)"
# Hydra's OverrideLexer.g4: INT, FLOAT, BOOL and NULL, whole values (the longest token wins; a tie goes to the rule
# written first, which these are, before ID)
PLAIN_VALUE_TYPES = (
    (re.compile(rf"[+-]?(?:(?:{_INT_UNSIGNED}|{_POINT_FLOAT})[eE][+-]?[0-9](?:_?[0-9])*|{_POINT_FLOAT}|[Ii][Nn][Ff]|"
                rf"[Nn][Aa][Nn])"), float),
    (re.compile(rf"[+-]?{_INT_UNSIGNED}"), int),
    (re.compile(r"[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]"), lambda text: text.lower() == "true"),
    (re.compile(r"[Nn][Uu][Ll][Ll]"), lambda text: None),
)
PLAIN_OVERRIDE = re.compile(rf"(?P<prefix>\+\+|\+|~)?(?P<key>{_ID}(?:(?:\.(?:{_ID}|0|[1-9][0-9]*))+|(?:/{_ID})+)?)"
                            r"(?:=(?P<value>[A-Za-z0-9_./\-]+))?")


def plain_override(text: str) -> Any:
    """The Override Hydra's grammar parses `text` into, where `text` has the plain form (item 8); else None."""
    from hydra.core.override_parser.types import Override, OverrideType, ValueType

    match = PLAIN_OVERRIDE.fullmatch(text)
    if match is None or (match["value"] is None and match["prefix"] != "~"):
        return None
    kind = {None: OverrideType.CHANGE, "+": OverrideType.ADD, "++": OverrideType.FORCE_ADD,
            "~": OverrideType.DEL}[match["prefix"]]
    value, value_type = None, None
    if match["value"] is not None:
        value, value_type = match["value"], ValueType.ELEMENT
        for pattern, convert in PLAIN_VALUE_TYPES:
            if pattern.fullmatch(value):
                value = convert(value)
                break
    override = Override(type=kind, key_or_group=match["key"], _value=value, value_type=value_type, package=None)
    override.input_line = text
    override.validate()
    return override


def _plain_overrides_read_without_the_grammar() -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parse_rule = OverridesParser.parse_rule

    def parse_rule_plain_first(self: OverridesParser, text: str, rule_name: str) -> Any:
        if rule_name == "override" and isinstance(text, str):
            override = plain_override(text)
            if override is not None:
                return override
        return parse_rule(self, text, rule_name)

    parse_rule_plain_first.__wrapped__ = parse_rule
    OverridesParser.parse_rule = parse_rule_plain_first
