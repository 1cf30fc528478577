"""The configs of a sweep's points, composed once where Hydra's own rules allow it.

Hydra's launchers compose every point from scratch (`load_sweep_config`, ~65 ms for this project's config). But
Hydra composes in two steps: the defaults list (config groups), then the command line's plain `key=value` overrides
applied to the result. So a point whose overrides differ from the first point's only in such values (`module.lr=`,
`launch.nproc_per_node=`: no config group, no key added or deleted, nothing under `hydra.`) is the first point's
config with those values applied, by Hydra's own code: the same config for ~2 ms. Any other point is composed by
Hydra as usual.
"""
from __future__ import annotations

import copy
from typing import Optional, Sequence

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, OmegaConf, read_write


class SweepComposer:
    """Composes the points of one sweep (hydra node included), reusing the first composed point where it can."""

    def __init__(self, config_loader, master_config: DictConfig):
        self.config_loader = config_loader
        self.master_config = master_config
        self.parser = OverridesParser.create()
        self.first: Optional[tuple[DictConfig, list[Override]]] = None

    def compose(self, overrides: Sequence[str]) -> DictConfig:
        parsed = self.parser.parse_overrides(list(overrides))
        if self.first is not None:
            config = self._from_first(parsed)
            if config is not None:
                return config
        config = self.config_loader.load_sweep_config(self.master_config, list(overrides))
        if self.first is None:
            self.first = (config, parsed)
        return config

    def check(self, overrides: Sequence[str]) -> None:
        """Raise what composing this point would raise, without keeping its config: plain values are applied to
        the first point's config in place (each check overwrites the last one's)."""
        parsed = self.parser.parse_overrides(list(overrides))
        changed = self._changed_values(parsed)
        if changed is None:
            config = self.config_loader.load_sweep_config(self.master_config, list(overrides))
            self.first = self.first or (config, parsed)
            return
        with read_write(self.first[0]):
            ConfigLoaderImpl._apply_overrides_to_config(changed, self.first[0])

    def _changed_values(self, parsed: list[Override]) -> Optional[list[Override]]:
        """The overrides that differ from the first point's, when all are plain values; else None."""
        if self.first is None:
            return None
        base, base_parsed = self.first
        if [override.key_or_group for override in parsed] != [override.key_or_group for override in base_parsed]:
            return None
        changed = [override for override, before in zip(parsed, base_parsed) if override.input_line != before.input_line]
        return changed if all(self._is_plain_value(base, override) for override in changed) else None

    def _from_first(self, parsed: list[Override]) -> Optional[DictConfig]:
        """The first point's config with this point's differing values applied; None when Hydra must compose it."""
        changed = self._changed_values(parsed)
        if changed is None:
            return None
        config = copy.deepcopy(self.first[0])
        with read_write(config):
            ConfigLoaderImpl._apply_overrides_to_config(changed, config)
            task_overrides = [override for override in parsed if not override.is_hydra_override()]
            with read_write(config.hydra):  # HydraConfig.set_config made the first point's hydra node read-only
                config.hydra.overrides.task = [override.input_line for override in task_overrides]
                dirname = config.hydra.job.config.override_dirname
                config.hydra.job.override_dirname = get_overrides_dirname(
                    overrides=task_overrides, kv_sep=dirname.kv_sep, item_sep=dirname.item_sep,
                    exclude_keys=dirname.exclude_keys)
        OmegaConf.copy_cache(from_config=self.master_config, to_config=config)
        return config

    def _is_plain_value(self, base: DictConfig, override: Override) -> bool:
        key = override.key_or_group
        if key == "model.from_hf" or (key.startswith("model.") and OmegaConf.select(base, "model.from_hf")):
            return False  # the folder's config.json is read, and model keys checked against it, as Hydra composes
        return (override.type == OverrideType.CHANGE and override.package is None
                and not override.is_hydra_override() and not self.config_loader.repository.group_exists(key)
                and OmegaConf.select(base, key, default=_ABSENT, throw_on_resolution_failure=False) is not _ABSENT)


_ABSENT = object()
