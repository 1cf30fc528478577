"""Reading values out of a composed config: enum options as strings, nodes as plain Python data."""
from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf


def option(value: Any) -> str:
    """An option's name whether the node holds an Enum member (typed config) or a plain string (a dict)."""
    return str(getattr(value, "value", value))


def plain(node: Any) -> Any:
    """A config node as plain dicts/lists/scalars with enums as strings; other values pass through."""
    if isinstance(node, DictConfig) or OmegaConf.is_list(node):
        return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    return getattr(node, "value", node)


def to_plain_data(value: Any) -> Any:
    """Dicts/lists/scalars only (paths, enums and other objects become strings), e.g. to dump as YAML."""
    if isinstance(value, dict):
        return {str(k): to_plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain_data(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return option(value)
