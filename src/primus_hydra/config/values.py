"""Plain data out of a composed config (to dump as YAML or JSON, or to hand to a library that wants dicts), and the
job's own config without Hydra's node."""
from __future__ import annotations

import copy
import dataclasses
from contextlib import contextmanager
from enum import Enum
from typing import Any, Iterator

from omegaconf import Container, DictConfig, ListConfig, OmegaConf, ValueNode, open_dict, read_write

_SCALARS = frozenset({type(None), bool, int, float, str})  # exactly these types (a Choice is a str subclass)


def to_plain(value: Any) -> Any:
    """Dicts, lists and scalars only: config nodes resolved, Choices as their names, dataclasses as dicts, paths
    and any other object as its string."""
    if type(value) in _SCALARS:  # the common case first: translations are mostly scalars
        return value
    if isinstance(value, dict):
        return {str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
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


@contextmanager
def hydra_node_set_aside(cfg: DictConfig) -> Iterator[DictConfig]:
    """`cfg` itself without Hydra's node while the block runs, for a reader that changes nothing (validation): what
    without_hydra_node copies, without the copy (~2 ms). Every node is back in its place after, also on an error,
    and so are the resolvers' cached results (what a block resolves, `${now:...}` say, is not kept: as on a copy)."""
    content = cfg.__dict__["_content"]
    if not isinstance(content, dict) or "hydra" not in content:
        yield cfg
        return
    metadata = cfg.__dict__["_metadata"]
    resolver_cache = metadata.resolver_cache
    metadata.resolver_cache = copy.deepcopy(resolver_cache)
    cfg.__dict__["_content"] = {key: node for key, node in content.items() if key != "hydra"}
    try:
        yield cfg
    finally:
        cfg.__dict__["_content"] = content
        metadata.resolver_cache = resolver_cache


class PlainTree(dict):
    """A config's values as nested dicts read like the config (attributes, `get`, items): enum members stay members,
    lists are lists. Reading and copying it cost a fraction of a DictConfig's; code that does more with a config
    than read it raises on it (the callers then use the config)."""

    __slots__ = ()

    @classmethod
    def of(cls, node: Any) -> Any:
        if isinstance(node, DictConfig):
            return cls({key: cls.of(read_value(node, key)) for key in node.keys()})
        if isinstance(node, ListConfig):
            return [cls.of(item) for item in node]
        return node

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def copied(self) -> PlainTree:
        """A copy whose nested trees and lists are copies too (the values themselves are shared)."""
        return PlainTree({key: value.copied() if isinstance(value, PlainTree) else
                          list(value) if isinstance(value, list) else value for key, value in self.items()})


def read_value(node: DictConfig, key: Any) -> Any:
    """node[key], but a plain value (no interpolation) read from its node without OmegaConf's lookups (~5x faster),
    a dict or list node as the node itself (what node[key] returns for it), and ??? as its text (node[key] raises
    there); an interpolation is resolved (and raises where it fails)."""
    child = node._get_node(key)
    if isinstance(child, Container) and isinstance(child.__dict__["_content"], (dict, list)):
        return child
    if child._is_missing() or (isinstance(child, ValueNode) and not child._is_interpolation()):
        return child._value()
    return node[key]


def get_value(cfg: Any, dotted: str) -> Any:
    """The value at a dotted key of a DictConfig or a PlainTree."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.select(cfg, dotted)
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def set_value(cfg: Any, dotted: str, value: Any) -> None:
    """Set a dotted key of a DictConfig (its schema checks and converts the value) or a PlainTree."""
    if isinstance(cfg, DictConfig):
        OmegaConf.update(cfg, dotted, value, merge=False)
        return
    *parents, leaf = dotted.split(".")
    for part in parents:
        cfg = cfg[part]
    cfg[leaf] = value


@contextmanager
def value_set(cfg: Any, dotted: str, value: Any) -> Iterator[Any]:
    """`cfg` with `dotted` set to `value` inside the block (which gets the value as stored), the value before put
    back after; a value the schema refuses raises before anything changes."""
    before = get_value(cfg, dotted)
    set_value(cfg, dotted, value)
    try:
        yield get_value(cfg, dotted)
    finally:
        set_value(cfg, dotted, before)
