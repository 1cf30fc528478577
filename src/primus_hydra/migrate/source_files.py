"""Reading a file task=import is handed: data and nothing else, bounded, every problem one line naming the file.

A Primus config is a small YAML mapping of text, numbers, booleans, lists and mappings with string keys (Primus's
loader turns every mapping into a SimpleNamespace, which needs string keys). What else a file could hold is refused
before anything reads it further:
- a FIFO, a device or a folder (only regular files are opened: a FIFO would block, /dev/zero never ends);
- more than MAX_SOURCE_BYTES (Primus's largest preset is ~20 KB);
- bytes that are not UTF-8 (Primus opens its files as text);
- YAML tags beyond the safe ones (`!!python/object/apply` ...: the safe loader refuses them) and safe tags whose
  values no config holds (`!!binary` bytes, `!!set`, `!!omap`, timestamps);
- aliases that expand past MAX_EXPANDED_VALUES values or refer to themselves (a 600-byte alias bomb expands to
  hundreds of millions of values: counted once per distinct node, before anything walks the tree), and nesting
  deeper than MAX_DEPTH.
A key written twice in one mapping takes the last value, as PyYAML (and so Primus) reads it, with a warning.
"""
from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from primus_hydra.errors import PrimusError
from primus_hydra.util.yaml_tags import ScalarTagsResolvedOnce

MAX_SOURCE_BYTES = 1 << 20
MAX_EXPANDED_VALUES = 200_000
MAX_DEPTH = 64
PLAIN_SCALARS = (str, int, float, bool, type(None))

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_source_text(path: Path) -> str:
    """The text of a regular file of at most MAX_SOURCE_BYTES, as UTF-8."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise PrimusError(f"{path}: cannot be read: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode) else \
            "a device or socket"
        raise PrimusError(f"{path}: {kind}, not a regular file; task=import reads YAML files only")
    if info.st_size > MAX_SOURCE_BYTES:
        raise PrimusError(f"{path}: {info.st_size} bytes; a Primus config is at most {MAX_SOURCE_BYTES} bytes "
                          f"(its largest preset is ~20 KB), so this is not one")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError as error:
        raise PrimusError(f"{path}: cannot be read: {error.strerror}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise PrimusError(f"{path}: more than {MAX_SOURCE_BYTES} bytes (it grew while read); not a Primus config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PrimusError(f"{path}: not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x}); Primus reads "
                          f"its YAML files as UTF-8 text") from None


class _SourceLoader(ScalarTagsResolvedOnce, _BaseLoader):
    """The safe loader (as Primus's), noting keys written twice in one mapping."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    self.duplicates.append(f"line {key_node.start_mark.line + 1}: key {key_node.value!r} is written "
                                           f"twice in one mapping; the last value counts (as Primus reads it)")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_source(path: Path) -> tuple[Any, list[str]]:
    """The file's data (None for an empty file) and its warnings; PrimusError (one line naming it) otherwise."""
    text = read_source_text(path)
    loader = _SourceLoader(text)
    try:
        tree = loader.get_single_data()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark else ""
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise PrimusError(f"{path}: not valid YAML{at}: {problem}") from None
    finally:
        loader.dispose()
    check_plain_data(tree, path)
    return tree, [f"{path.name}: {line}" for line in loader.duplicates]


def check_plain_data(tree: Any, path: Path) -> None:
    """Refuses what is not plain config data (see the module's docstring): each a PrimusError naming the key."""
    sizes: dict[int, int] = {}
    _expanded_size(tree, path, (), sizes, set())


def _where(keys: tuple) -> str:
    return ".".join(str(key) for key in keys) or "the top level"


def _expanded_size(node: Any, path: Path, keys: tuple, sizes: dict, open_nodes: set) -> int:
    if isinstance(node, PLAIN_SCALARS):
        return 1
    if not isinstance(node, (dict, list)):
        raise PrimusError(f"{path}: {_where(keys)} holds {_kind(node)}, which no config holds (text, numbers, "
                          f"booleans, lists and mappings do){_hint(node)}")
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:
        raise PrimusError(f"{path}: {_where(keys)} refers to itself through a YAML alias (a value that never ends)")
    if len(keys) > MAX_DEPTH:
        raise PrimusError(f"{path}: values nested more than {MAX_DEPTH} deep at {_where(keys[:4])}...; not a config")
    open_nodes.add(id(node))
    total = 1
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        if isinstance(node, dict) and not isinstance(key, str):
            raise PrimusError(f"{path}: the key {key!r} at {_where(keys)} is not text (Primus's loader refuses "
                              f"non-string keys); quote it")
        total += _expanded_size(value, path, keys + (key,), sizes, open_nodes)
        if total > MAX_EXPANDED_VALUES:
            raise PrimusError(f"{path}: expands to more than {MAX_EXPANDED_VALUES} values through YAML aliases "
                              f"(at {_where(keys)}); not a config")
    open_nodes.discard(id(node))
    sizes[id(node)] = total
    return total


def _kind(value: Any) -> str:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f"a YAML date ({value.isoformat()})"
    names = {bytes: "bytes (a !!binary value)", set: "a set (!!set)", tuple: "a pair (!!omap/!!pairs)"}
    return names.get(type(value), f"a {type(value).__name__}")


def _hint(value: Any) -> str:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "; quote it if it is meant as text"
    return ""
