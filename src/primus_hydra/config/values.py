"""Plain data out of a composed config (to dump as YAML or JSON, or to hand to a library that wants dicts), and the
job's own config without Hydra's node."""
from __future__ import annotations

import copy
import dataclasses
from enum import Enum
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write


def to_plain(value: Any) -> Any:
    """Dicts, lists and scalars only: config nodes resolved, Choices as their names, dataclasses as dicts, paths
    and any other object as its string."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, Enum):  # before str: a Choice is a str too
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def override_text(value: Any) -> str:
    """A scalar as a command-line override writes it: null, true/false, else its string."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def without_hydra_node(cfg: DictConfig) -> DictConfig:
    """A copy of the composed config without Hydra's own node: what the job reads."""
    if "hydra" not in cfg:
        return copy.deepcopy(cfg)
    hydra_node = cfg._get_node("hydra")
    job = copy.deepcopy(cfg, {id(hydra_node): hydra_node})  # the hydra subtree (half the config) is not copied...
    with read_write(job), open_dict(job):
        del job["hydra"]  # ...since the copy drops it
    return job
