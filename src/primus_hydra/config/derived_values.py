"""Failures about a value the config derives from another one by interpolation, told in terms of what the user
typed: the module presets set `module.min_lr: ${primus.times:${.lr},0.1}`, so `module.lr=-1` makes min_lr -0.1,
and a line that names only `module.min_lr=-0.1` sends the user after a key they never set.

A failure that names a derived key is dropped when a key it is derived from fails on its own line (one mistake,
one line); otherwise it is kept and says which typed keys the value comes from and how.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

# ${key}, ${.sibling}, ${..key_of_the_parent}: references to other nodes (a resolver call has a ':' after its name)
NODE_REFERENCE = re.compile(r"\$\{\s*(\.*[A-Za-z_][\w.-]*)\s*\}")
NAMED_KEY = re.compile(r"(?<![\w.])([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+)(?==)")  # `module.min_lr` in `module.min_lr=-0.1`


def with_typed_sources(cfg: DictConfig, failures: list[str]) -> list[str]:
    """`failures` (one line each) with every line about a derived key dropped or restated (see the module doc)."""
    subjects = {_subject(line) for line in failures} - {None}
    told = []
    for line in failures:
        notes, repeated = [], False
        for key in dict.fromkeys(NAMED_KEY.findall(line)):
            expression = interpolation_of(cfg, key)
            if expression is None:
                continue
            sources = typed_sources(cfg, key)
            if any(source in subjects for source, _ in sources):
                repeated = True
                break
            if sources:
                typed = ", ".join(f"{source}={value}" for source, value in sources)
                change = " or ".join(source for source, _ in sources)
                notes.append(f"{key} is derived from {typed} as {expression}: change {change}, or set {key} itself")
        if not repeated:
            told.append("; ".join([line, *notes]))
    return told


def interpolation_of(cfg: DictConfig, key: str) -> Optional[str]:
    """The interpolation `key` is written as (`${primus.times:${.lr},0.1}`), or None for a value typed as is."""
    parent_key, _, leaf = key.rpartition(".")
    try:
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        node = parent._get_node(leaf) if isinstance(parent, DictConfig) else None
    except Exception:  # noqa: BLE001 - a name in a message that is not a key of this config
        return None
    if node is None or not node._is_interpolation():
        return None
    return str(node._value())


def typed_sources(cfg: DictConfig, key: str, _seen: Optional[set] = None) -> list[tuple[str, Any]]:
    """(key, value) of the values `key` is derived from, followed through interpolations down to values that were
    typed; [] when it reads none (an environment variable, a resolver without keys)."""
    seen = _seen if _seen is not None else {key}
    expression = interpolation_of(cfg, key)
    sources: list[tuple[str, Any]] = []
    for reference in NODE_REFERENCE.findall(expression or ""):
        source = _absolute(key, reference)
        if source in seen:
            continue
        seen.add(source)
        if interpolation_of(cfg, source) is not None:
            sources += typed_sources(cfg, source, seen)
        else:
            sources.append((source, OmegaConf.select(cfg, source, throw_on_resolution_failure=False)))
    return sources


def _absolute(key: str, reference: str) -> str:
    """`${.lr}` written at `module.min_lr` is `module.lr`; each further leading dot is one level up."""
    dots = len(reference) - len(reference.lstrip("."))
    if not dots:
        return reference
    parts = key.split(".")[:-1]  # the node's parent
    parts = parts[:len(parts) - (dots - 1)] if dots > 1 else parts
    return ".".join([*parts, reference[dots:]])


def _subject(line: str) -> Optional[str]:
    """The key a failure is about: the one it starts with (`module.lr=-1.0: must be > 0`)."""
    match = re.match(r"([A-Za-z_][\w.-]*)[=:]", line)
    return match.group(1) if match else None
