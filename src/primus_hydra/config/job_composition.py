"""The job's config without Hydra's own: what `--cfg job` prints and what task=import checks each experiment
against, composed by Hydra's own defaults tree, merges and overrides with Hydra's config left out.

Before the job's config Hydra scans every installed plugin and composes its own (`hydra/config`: the launcher,
sweeper, logging, help and output groups, about ten of the ~25 configs a composition merges): ~50 ms of the ~140 ms
`--cfg job` took over `import hydra` (docs/benchmarks.md), for a node that `--cfg job` then deletes. Here the config
repository answers `hydra/config` with an empty node and leaves out every defaults entry of Hydra's groups
(`override /hydra/launcher: primus_local`, `/hydra/callbacks: [primus]`); the `hydra:` sections of the configs merge
into that untyped node, which is removed before the command line's overrides are applied. Everything else, the
defaults tree, the packages, `_self_`, the schemas, the merges, is Hydra's own code.

It answers None wherever the job's config could differ from the one Hydra composes, and the caller composes with
Hydra as before: an override of Hydra's config (`hydra.*`, `hydra/...`; `hydra.searchpath` is read as Hydra reads
it), a sweep, an installed plugin package this project does not know (a plugin may add a config search path), and
any failure, so that every error is worded by Hydra's own path. What it does not check is the `hydra:` sections
themselves (a run composes them). tests/unit/test_job_composition.py checks that every option of every group
composes to Hydra's job config, node type for node type.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import field
from typing import Any, Callable, Iterator, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, flag_override

from primus_hydra.config.hf_config import apply_model_from_hf
from primus_hydra.util.records import record

# the packages under hydra_plugins/ whose plugins add no config search path: Hydra's submitit, joblib and Optuna
# plugins, and this project's own
KNOWN_PLUGIN_PACKAGES = frozenset({"hydra_submitit_launcher", "hydra_joblib_launcher", "hydra_optuna_sweeper",
                                   "primus_local_launcher", "primus_slurm_launcher", "primus_sweeper"})
HYDRA_ROOT_CONFIG = "hydra/config"


@record
class JobComposition:
    """The job's config, and what of Hydra's config its files asked for and was left out."""

    cfg: DictConfig
    hydra_sections: dict  # the configs' `hydra:` sections, merged (plain data)
    # each defaults entry of Hydra's groups left out: (the config that has it, *_entry_fields), once each
    hydra_entries: list[tuple] = field(default_factory=list)
    choices: dict = field(default_factory=dict)  # the defaults tree's known choices (hydra.runtime.choices), in order
    parsed_overrides: list = field(default_factory=list)  # the command line's, as Hydra parsed them
    sources: list = field(default_factory=list)  # the config sources it read (Hydra's own configs' left out)


# (config loader, the defaults list's entries, repository) -> the config they merge to: Hydra's own merge loop, or one
# that gives the same (task=import's tasks/import_bases.py)
Merge = Callable[[Any, list, Any], DictConfig]


def compose_job_config(search_path_dir: str, config_name: str, overrides: Sequence[str],
                       merge: Optional[Merge] = None) -> Optional[DictConfig]:
    """The config Hydra composes for `overrides` from `search_path_dir` (a folder or `pkg://` module), without its
    `hydra` node, or None where only Hydra's own path can tell (the module's docstring)."""
    composition = compose_job(search_path_dir, config_name, overrides, merge)
    return composition.cfg if composition is not None else None


def compose_job(search_path_dir: str, config_name: str, overrides: Sequence[str],
                merge: Optional[Merge] = None, hydra_values: bool = False) -> Optional[JobComposition]:
    """compose_job_config, with what it left out of Hydra's config (a caller that runs the job without Hydra checks
    that it is this project's own). hydra_values: an override of a value of Hydra's config (`hydra.run.dir=...`)
    is the caller's to apply (config/run_composition.py), not a reason to answer None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not _only_known_plugins():
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - Hydra's path words the error
        return None
    if any(override.is_sweep_override() or _needs_hydras_config(override, hydra_values) for override in parsed):
        return None
    _register_config_sources()
    with _package_source_when_used():
        return _composed(search_path_dir, config_name, overrides, parsed, merge)


def _composed(search_path_dir: str, config_name: str, overrides: Sequence[str], parsed: list,
              merge: Optional[Merge]) -> Optional[JobComposition]:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.defaults_list import create_defaults_list

    loader = ConfigLoaderImpl(config_search_path=_search_path(search_path_dir))
    repo = _without_hydras_config(loader.repository)
    try:
        loader._process_config_searchpath(config_name, parsed, repo)
        defaults = create_defaults_list(repo=repo, config_name=config_name, overrides_list=parsed,
                                        prepend_hydra=True, skip_missing=False)
        if merge is None:
            cfg = loader._compose_config_from_defaults_list(defaults=defaults.defaults, repo=repo)
        else:
            cfg = merge(loader, defaults.defaults, repo)
        hydra_sections = OmegaConf.to_container(cfg.hydra, resolve=False)
        with flag_override(cfg, ["struct", "readonly"], False):
            del cfg["hydra"]
        OmegaConf.set_struct(cfg, True)
        ConfigLoaderImpl._apply_overrides_to_config(
            [override for override in defaults.config_overrides if not override.is_hydra_override()], cfg)
        apply_model_from_hf(cfg, overrides)
    except Exception:  # noqa: BLE001 - Hydra's path words the error
        return None
    return JobComposition(cfg, hydra_sections, repo.hydra_entries,
                          dict(defaults.overrides.known_choices), parsed, list(repo.get_sources()))


def _needs_hydras_config(override: Any, hydra_values: bool = False) -> bool:
    if not override.is_hydra_override() or override.get_key_element() == "hydra.searchpath":
        return False
    return not (hydra_values and override.key_or_group.startswith("hydra.") and override.package is None)


def _only_known_plugins() -> bool:
    import pkgutil

    try:
        import hydra_plugins
    except ImportError:
        return True
    return {module.name for module in pkgutil.iter_modules(hydra_plugins.__path__)} <= KNOWN_PLUGIN_PACKAGES


def _register_config_sources() -> None:
    """Two of the config sources Hydra's plugin scan registers (file://, structured://), without the scan; pkg:// is
    _package_source_when_used's."""
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource
    from hydra._internal.sources_registry import SourcesRegistry

    for source in (FileConfigSource, StructuredConfigSource):
        SourcesRegistry.instance().register(source)


@contextlib.contextmanager
def _package_source_when_used() -> Iterator[None]:
    """The pkg:// source (compose()'s `pkg://primus_hydra.conf`, `hydra.searchpath=[pkg://...]`): a plain folder
    package's read from its folder (config/package_config_source.py), any other package's Hydra's own, imported
    then (with zipfile and importlib.resources, ~5 ms). Registered for the composition only: Hydra's plugin scan, if
    it comes later, registers Hydra's."""
    from hydra._internal.sources_registry import SourcesRegistry

    types = SourcesRegistry.instance().types
    if "pkg" in types:
        yield
        return
    types["pkg"] = _PackageConfigSource
    try:
        yield
    finally:
        if types.get("pkg") is _PackageConfigSource:
            del types["pkg"]


class _PackageConfigSource:
    """Stands in for Hydra's ImportlibResourcesConfigSource under the `pkg` scheme: constructing it returns the
    source config/package_config_source.py chooses (a plain folder's, else Hydra's own)."""

    @staticmethod
    def scheme() -> str:
        return "pkg"

    def __new__(cls, provider: str, path: str) -> Any:
        from primus_hydra.config.package_config_source import package_config_source

        return package_config_source(provider, path)


def _search_path(search_path_dir: str) -> Any:
    """Hydra's search path for a primary config folder (hydra._internal.utils.create_config_search_path) where no
    installed plugin adds to it, less its first entry, Hydra's own configs (pkg://hydra.conf: only hydra/..., which
    this composition answers or leaves out)."""
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl

    search_path = ConfigSearchPathImpl()
    search_path.append("main", search_path_dir)
    search_path.append("schema", "structured://")
    return search_path


def _without_hydras_config(repository: Any) -> Any:
    from hydra._internal.config_repository import CachingConfigRepository
    from hydra.plugins.config_source import ConfigResult

    class JobConfigRepository(CachingConfigRepository):
        """Hydra's caching repository, with `hydra/config` an empty node and no defaults entry of Hydra's groups
        (each one left out is recorded)."""

        def __init__(self, delegate: Any) -> None:
            super().__init__(delegate)
            self.hydra_entries: list[tuple] = []

        def load_config(self, config_path: str) -> Optional[ConfigResult]:
            if config_path == HYDRA_ROOT_CONFIG:
                return ConfigResult(provider="primus_hydra", path="job_composition", config=OmegaConf.create(),
                                    header={"package": None}, defaults_list=[], is_schema_source=True)
            result = super().load_config(config_path)
            if result is not None and result.defaults_list:
                kept = []
                for entry in result.defaults_list:
                    if _hydras_group(entry, config_path) is None:
                        kept.append(entry)
                    elif (config_path, *_entry_fields(entry)) not in self.hydra_entries:  # Hydra loads a config
                        self.hydra_entries.append((config_path, *_entry_fields(entry)))  # more than once
                result.defaults_list = kept
            return result

    return JobConfigRepository(repository)


def _entry_fields(entry: Any) -> tuple:
    """A defaults entry as plain values: its kind, group or path, option(s), package and flags."""
    options = getattr(entry, "value", None)
    return (type(entry).__name__, getattr(entry, "group", None) or getattr(entry, "path", None),
            list(options) if isinstance(options, (list, tuple)) else options, entry.package,
            bool(getattr(entry, "override", False)), bool(entry.optional), bool(getattr(entry, "deleted", False)))


def _hydras_group(entry: Any, config_path: str) -> Optional[str]:
    """The group of Hydra's (hydra/...) a defaults entry of the config at `config_path` names, else None."""
    name = getattr(entry, "group", None) or getattr(entry, "path", None) or ""
    if name.startswith("/"):
        name = name[1:]
    else:
        name = os.path.join(os.path.dirname(config_path), name)
    return name if name == "hydra" or name.startswith("hydra/") else None
