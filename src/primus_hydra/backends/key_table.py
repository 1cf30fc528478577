"""A backend's key table: each canonical key that the backend takes as it is, with the backend's own name for it.

One table drives the three places that name a backend's keys: the translation (backends/<name>/args.py, a group of
keys at a time), the import of a Primus experiment (migrate/mapping.py: the backend's name back to the canonical
key) and the check of what an imported experiment's dry run exports (migrate/check.py). A key whose native value
is derived from more than one canonical value (Megatron's lr_decay_iters: train_iters when null) is in the table
for the import and the check and translated by args.py's own code (`translated=False`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional


@dataclass(frozen=True)
class Key:
    canonical: str  # the canonical key path (module.lr)
    native: str  # the backend's name: an argument (lr), or section.key for a sectioned config (optimizer.lr)
    group: Optional[str] = None  # the part of args.py that translates it (one parent node per group)
    kind: Optional[Callable[[Any], Any]] = None  # what an imported value is read as (float, bool); None: as it is
    imports_null: bool = True  # False: an imported null is left out (the canonical default stays)
    translated: bool = True  # False: args.py derives the native value from more than this key
    checked: bool = False  # migrate/check.py compares a dry run's value with Primus's

    @property
    def leaf(self) -> str:
        """The canonical key's name in its parent node."""
        return self.canonical.rsplit(".", 1)[-1]

    @property
    def native_leaf(self) -> str:
        """The native name inside its section (the whole name when the backend's config is flat)."""
        return self.native.rsplit(".", 1)[-1]


class KeyTable(tuple):
    """The keys of one backend, in the order an import writes them."""

    def __new__(cls, keys: Iterable[Key]) -> "KeyTable":
        table = super().__new__(cls, keys)
        parents: dict[str, str] = {}
        for key in table:
            parent = key.canonical.rsplit(".", 1)[0]
            if key.group is not None and parents.setdefault(key.group, parent) != parent:
                raise ValueError(f"key group {key.group!r} reads {parents[key.group]} and {parent}: one node a group")
        return table

    def native(self, canonical: str) -> str:
        return next(key.native for key in self if key.canonical == canonical)

    def translate(self, node: Any, group: str) -> dict:
        """The group's keys read from their parent node (a config node, or an object with those attributes), under
        the backend's names (inside their section)."""
        return {native: getattr(node, leaf) for native, leaf in self._names_of(group)}

    def _names_of(self, group: str) -> tuple[tuple[str, str], ...]:
        """(native name, canonical leaf) of the group's translated keys, found once per table (a translation asks
        for each group; the extra_args owner search translates ~50 times a config)."""
        groups = self.__dict__.setdefault("_groups", {})
        if group not in groups:
            groups[group] = tuple((key.native_leaf, key.leaf) for key in self if key.group == group and key.translated)
        return groups[group]

    def checked(self) -> tuple[str, ...]:
        return tuple(key.native for key in self if key.checked)
