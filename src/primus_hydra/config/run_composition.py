"""A run's whole config (the job's and Hydra's `hydra` node) as Hydra's ConfigLoaderImpl.load_configuration composes
it for a single run, without composing Hydra's own config: the job's config from config/job_composition.py, the
`hydra` node kept from Hydra's composition (config/kept_nodes.py), then Hydra's finishing steps on the whole
(the `hydra.*` overrides, the command line's lists, the choices, the runtime fields), in Hydra's order.

It answers None wherever Hydra's composition could differ or its error words matter, and the caller composes with
Hydra: whatever job_composition leaves to Hydra (a sweep, an unknown plugin package, a config it cannot compose), an
override of one of Hydra's groups (`hydra/launcher=...`) or of `hydra.searchpath`, a conf/ other than this
project's, configs whose `hydra:` sections or Hydra-group entries have no kept node, a kept node that may be stale,
and any failure of the finishing steps. tests/unit/test_run_composition.py checks the result against Hydra's, node
for node, on every option of every group and each kind of override.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from primus_hydra.config.job_composition import JobComposition, compose_job
from primus_hydra.config.kept_nodes import kept_hydra_node, key_of
from primus_hydra.config.paths import find_conf_dir

OWN_CONF_MODULE = "pkg://primus_hydra.conf"
RUN_MODE_OVERRIDE = "hydra.mode=RUN"  # what Hydra's _run_app adds for a run when the config sets no mode


def compose_run_config(search_path_dir: str, config_name: str, overrides: Sequence[str], *, job_name: str,
                       add_run_mode: bool = False) -> Optional[DictConfig]:
    """The config Hydra composes for a single run of `overrides` from this project's conf/ (`search_path_dir`: its
    folder, or `pkg://primus_hydra.conf`), `hydra` node included; None where only Hydra can tell (module docstring).
    job_name: Hydra's task name (what hydra.job.name is where no config sets it). add_run_mode: append
    `hydra.mode=RUN` as Hydra's command line does for a run when the config sets no mode."""
    conf_dir = _own_conf_dir(search_path_dir)
    if conf_dir is None:
        return None
    composition = compose_job(search_path_dir, config_name, overrides, hydra_values=True)
    if composition is None or any(override.key_or_group == "hydra.searchpath"  # Hydra's configs searched again
                                  for override in composition.parsed_overrides):  # (its groups: None above)
        return None
    kept = kept_hydra_node(key_of(composition.hydra_sections, composition.hydra_entries), conf_dir)
    if kept is None:
        return None
    node, made_with = kept
    if add_run_mode:
        if node.mode is not None:  # the config's own mode: Hydra's command line adds none (a multirun: Hydra's path)
            return None
        from hydra.core.override_parser.overrides_parser import OverridesParser

        # a value of Hydra's config: the job's composition is the same with it
        composition.parsed_overrides.extend(OverridesParser.create().parse_overrides([RUN_MODE_OVERRIDE]))
    try:
        return _finished(_whole_config(composition.cfg, node), composition, made_with, config_name, job_name)
    except Exception:  # noqa: BLE001 - Hydra's path words the error
        return None


def _own_conf_dir(search_path_dir: str) -> Optional[Path]:
    own = Path(find_conf_dir())
    if search_path_dir == OWN_CONF_MODULE:
        return own
    folder = search_path_dir[len("file://"):] if search_path_dir.startswith("file://") else search_path_dir
    return own if "://" not in folder and Path(folder).resolve() == own.resolve() else None


def _whole_config(job_cfg: DictConfig, hydra_node: DictConfig) -> DictConfig:
    """The job's config with the `hydra` node first, as Hydra's composition merges Hydra's config first."""
    content = job_cfg.__dict__["_content"]
    job_cfg.__dict__["_content"] = {"hydra": hydra_node, **content}
    hydra_node._set_parent(job_cfg)
    hydra_node._set_key("hydra")
    job_cfg._invalidate_flags_cache()
    return job_cfg


def _finished(cfg: DictConfig, composition: JobComposition, made_with: dict, config_name: str,
              job_name: str) -> DictConfig:
    """Hydra's ConfigLoaderImpl._load_configuration_impl after its merges, on the whole config (the job's own
    overrides were applied by job_composition: they write no key of the `hydra` node)."""
    from hydra import __version__, version
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

    OmegaConf.set_struct(cfg, True)
    OmegaConf.set_readonly(cfg.hydra, False)
    parsed = composition.parsed_overrides
    ConfigLoaderImpl._apply_overrides_to_config([override for override in parsed if override.is_hydra_override()],
                                                cfg)
    app_overrides = []
    for override in parsed:
        if override.is_hydra_override():
            cfg.hydra.overrides.hydra.append(override.input_line)
        else:
            cfg.hydra.overrides.task.append(override.input_line)
            app_overrides.append(override)
    with open_dict(cfg.hydra):
        cfg.hydra.runtime.choices.update({**composition.choices, **made_with["hydra_choices"]})
        for key in cfg.hydra.job.env_copy:
            cfg.hydra.job.env_set[key] = os.environ[key]
    cfg.hydra.runtime.version = __version__
    cfg.hydra.runtime.version_base = version.getbase()
    cfg.hydra.runtime.cwd = os.getcwd()
    cfg.hydra.runtime.config_sources = [_source_info(*made_with["hydra_source"]),
                                        *(_source_info(source.path, source.scheme(), source.provider)
                                          for source in composition.sources)]
    if "name" not in cfg.hydra.job:
        cfg.hydra.job.name = job_name
    cfg.hydra.job.override_dirname = get_overrides_dirname(
        overrides=app_overrides, kv_sep=cfg.hydra.job.config.override_dirname.kv_sep,
        item_sep=cfg.hydra.job.config.override_dirname.item_sep,
        exclude_keys=cfg.hydra.job.config.override_dirname.exclude_keys)
    cfg.hydra.job.config_name = config_name
    return cfg


def _source_info(path: str, schema: str, provider: str) -> Any:
    from hydra.conf import ConfigSourceInfo

    return ConfigSourceInfo(path=path, schema=schema, provider=provider)
