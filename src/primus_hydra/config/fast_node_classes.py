"""config/fast_omegaconf.py's items 12 and 13: OmegaConf's node classes asked about and walked faster, for speed only.

12. OmegaConf's node classes derive from `Node(ABC)`, so every isinstance() of a node against a class it is not
    exactly (`isinstance(node, Box)`, `Container`, `Node`, `ValueNode`: ~15,000 a composition, more in a run's start)
    calls ABCMeta.__instancecheck__, a Python function (~0.2 us against ~0.01). No class of OmegaConf's is registered
    as a virtual subclass of another or has a subclass hook, so the answer is always the class's MRO: the node
    classes get an ABCMeta whose instance and subclass checks are `type`'s own. Abstract methods still refuse
    instantiation (that is the class's flag, not the metaclass's), and a class derived later gets the same metaclass.

13. Re-parenting a config after every merge (`Box._re_parent`, the whole tree each time) and invalidating a
    subtree's flag caches (`Container._invalidate_flags_cache`) import DictConfig and ListConfig on every call
    (~3,000 calls a composition). The same functions, with the classes looked up once.
"""
from __future__ import annotations

import abc
from typing import Any


class NodeClass(abc.ABCMeta):
    """The metaclass of OmegaConf's node classes once item 12 is installed."""

    __instancecheck__ = type.__instancecheck__
    __subclasscheck__ = type.__subclasscheck__


def install() -> None:
    _node_classes_checked_by_their_mro()
    _walk_trees_without_imports()


def _node_classes_checked_by_their_mro() -> None:
    from omegaconf.base import Node

    pending = [Node]
    while pending:
        cls = pending.pop()
        if type(cls) is abc.ABCMeta and cls.__module__.split(".")[0] == "omegaconf" and _answered_by_its_mro(cls):
            cls.__class__ = NodeClass
        pending.extend(cls.__subclasses__())


def _answered_by_its_mro(cls: type) -> bool:
    """No class is registered as its virtual subclass and no class of its MRO has a subclass hook that could answer
    for it (collections.abc's answer for themselves only: DictConfig is a MutableMapping)."""
    registry = abc._get_dump(cls)[0]
    return not registry and not any("__subclasshook__" in vars(base) for base in cls.__mro__
                                    if base.__module__ not in ("builtins", "collections.abc"))


def _walk_trees_without_imports() -> None:
    from omegaconf.base import Box, Container, Node, UnionNode
    from omegaconf.dictconfig import DictConfig
    from omegaconf.listconfig import ListConfig

    def children(node: Any) -> Any:  # a dict's or a list's nodes; none where its content is None, ??? or ${...}
        content = node.__dict__["_content"]
        return content.values() if isinstance(content, dict) else content if isinstance(content, list) else ()

    def _re_parent(self: Any) -> None:  # omegaconf.base.Box._re_parent, its imports done once
        if isinstance(self, (DictConfig, ListConfig)):
            for value in children(self):
                if value is not None:
                    value._set_parent(self)
                if isinstance(value, Box):
                    value._re_parent()
        elif isinstance(self, UnionNode):
            content = self.__dict__["_content"]
            if isinstance(content, Node):
                content._set_parent(self)
                if isinstance(content, Box):
                    content._re_parent()

    def _invalidate_flags_cache(self: Any) -> None:  # omegaconf.base.Container's, its imports done once
        if self.__dict__["_flags_cache"] is not None:
            self.__dict__["_flags_cache"] = None
            if isinstance(self, (DictConfig, ListConfig)):
                for value in children(self):
                    value._invalidate_flags_cache()

    _re_parent.__wrapped__ = Box._re_parent
    _invalidate_flags_cache.__wrapped__ = Container._invalidate_flags_cache
    Box._re_parent = _re_parent
    Container._invalidate_flags_cache = _invalidate_flags_cache
