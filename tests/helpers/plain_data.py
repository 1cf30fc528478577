"""Reading nested plain data (dicts, lists, scalars: a YAML file as loaded, a config made plain)."""
from __future__ import annotations

from typing import Any, Iterator


def leaves(tree: Any) -> Iterator[Any]:
    """Every value that is neither a dict nor a list, depth first."""
    if isinstance(tree, dict):
        for value in tree.values():
            yield from leaves(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from leaves(value)
    else:
        yield tree
