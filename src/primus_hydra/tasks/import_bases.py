"""The config of an imported experiment's group choices, for task=import's check (tasks/import_composition.py), with
the model merged last: Primus's examples choose ~100 (module, backend, model) combinations, 6 of (module, backend).

Hydra merges the configs of the defaults list in order: the schema, config.yaml, platform, module, the model, then
the backend's, task's, hardware's and logger's schemas and configs. Where the model's config is one file of package
`model` with no defaults of its own, and no config after it writes `model`, merging it in its place or last gives the
same config: the configs after it write other nodes, and what the model's merge reads is what the schema and the
configs before it left under `model` either way. So the configs other than the model's are merged once per process
(kept by their entries and the chosen files' texts) and each model merged onto a copy: ~5 ms a combination where
Hydra's loop takes ~30. A defaults list of any other shape is merged by Hydra's own loop.
tests/unit/test_import_bases.py holds the two equal, node for node, for every model of conf/ and a generated one.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Optional

from omegaconf import DictConfig, flag_override

MODEL_GROUP = "model"
KEPT = 64
_without_model: dict[tuple, Optional[DictConfig]] = {}  # the other entries, and what they read -> merged (None: not
# of the shape: a config after the model's writes `model`)


def model_merged_last(chosen_texts: tuple) -> Callable[[Any, list, Any], DictConfig]:
    """A merge for config/job_composition.compose_job_config; `chosen_texts`: what the chosen files other than the
    model read from the config dir (import_composition._base_key's entries)."""

    def merge(loader: Any, defaults: list, repo: Any) -> DictConfig:
        models = [index for index, entry in enumerate(defaults) if _group(entry) == MODEL_GROUP]
        if len(models) != 1 or not _single_model_file(defaults, models[0]):
            return loader._compose_config_from_defaults_list(defaults=defaults, repo=repo)
        model_entry = defaults[models[0]]
        others = defaults[:models[0]] + defaults[models[0] + 1:]
        key = (tuple(_entry_key(entry) for entry in others), models[0], chosen_texts)
        if key not in _without_model:
            if len(_without_model) >= KEPT:
                _without_model.clear()
            _without_model[key] = _merged_without(loader, others, defaults[models[0] + 1:], repo)
        merged = _without_model[key]
        model = loader._load_single_config(default=model_entry, repo=repo).config
        body = model._get_node(MODEL_GROUP) if set(model.keys()) == {MODEL_GROUP} else None
        if merged is None or not isinstance(body, DictConfig) or "defaults" in body:
            return loader._compose_config_from_defaults_list(defaults=defaults, repo=repo)
        cfg = copy.deepcopy(merged)
        with flag_override(cfg, "no_deepcopy_set_nodes", True):  # as Hydra's loop merges: the loaded copy is its own
            cfg.merge_with(model)
        return cfg

    return merge


def _merged_without(loader: Any, others: list, after_model: list, repo: Any) -> Optional[DictConfig]:
    """Hydra's merge of `others`, or None where a config after the model's writes `model`."""
    for entry in after_model:
        if MODEL_GROUP in loader._load_single_config(default=entry, repo=repo).config:
            return None
    return loader._compose_config_from_defaults_list(defaults=others, repo=repo)


def _single_model_file(defaults: list, index: int) -> bool:
    """The model's entry is a config of package `model` that no other entry descends from (no defaults of its own)."""
    entry = defaults[index]
    return entry.package == MODEL_GROUP and not entry.is_self and \
        not any(other.parent == entry.config_path for other in defaults)


def _group(entry: Any) -> Optional[str]:
    path = entry.config_path or ""
    return path.rsplit("/", 1)[0] if "/" in path else None


def _entry_key(entry: Any) -> tuple:
    return entry.config_path, entry.package, entry.parent, entry.is_self, entry.primary
