"""`@record`, `@record(frozen=True)` and `@record(repr=False)`: the dataclass `@dataclass` makes with those options,
made without compiling anything.

The dataclass decorator writes each class's __init__, __repr__, __eq__ (and, frozen, __setattr__, __delattr__,
__hash__) as source text and compiles it: ~0.5-1 ms a class on this machine, paid by every command for every class
it imports before it answers (~70 for task=projection: the schemas, the plan, the projection's records). Here those
methods are shared functions reading a table each class gets when it is decorated, with the dataclass's behaviour:
the same arguments (positional or by keyword), defaults and default factories, `__post_init__`, field options
(init, repr, compare, hash), equality and hashing by the compared fields, FrozenInstanceError on assignment.
`dataclasses.fields`, `replace`, `asdict`, `is_dataclass` and OmegaConf see a dataclass. Options beyond these
(order, slots, kw_only, InitVar) are the standard decorator's: use it for those classes.
tests/unit/test_records.py holds each behaviour equal to the standard decorator's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, FrozenInstanceError
from typing import Any, Callable, Optional, TypeVar, overload

RecordType = TypeVar("RecordType", bound=type)


@overload
def record(cls: RecordType, /) -> RecordType: ...


@overload
def record(*, frozen: bool = False, repr: bool = True) -> Callable[[RecordType], RecordType]: ...


def record(cls: Optional[type] = None, /, *, frozen: bool = False, repr: bool = True) -> Any:
    """repr=False: the class keeps the __repr__ it defines or inherits, as the dataclass's option does."""
    if cls is None:
        return lambda cls: _make(cls, frozen, repr)
    return _make(cls, frozen, repr)


def _make(cls: type, frozen: bool, shown: bool = True) -> type:
    documented = cls.__dict__.get("__doc__") is not None
    if not documented:  # or the decorator would build one from inspect.signature
        cls.__doc__ = cls.__qualname__
    for name, shared in (("__init__", _init), ("__repr__", _repr if shown else None), ("__eq__", _eq)):
        if shared is not None and name not in cls.__dict__:
            setattr(cls, name, shared)
    if frozen:
        cls.__setattr__, cls.__delattr__ = _refuse_assignment, _refuse_deletion
    if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
        cls.__hash__ = _hash if frozen else None  # as @dataclass: hashable when frozen, else not
    made = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    specs = dataclasses.fields(made)
    if not documented:  # what the dataclass decorator would write, less the annotations
        made.__doc__ = f"{cls.__qualname__}({', '.join(spec.name for spec in specs if spec.init)})"
    made.__record__ = _Table(
        assign=object.__setattr__ if frozen else setattr,
        init=tuple((spec.name, spec.default, spec.default_factory) for spec in specs if spec.init),
        after_init=tuple((spec.name, spec.default, spec.default_factory) for spec in specs if not spec.init),
        shown=tuple(spec.name for spec in specs if spec.repr),
        compared=tuple(spec.name for spec in specs if spec.compare),
        hashed=tuple(spec.name for spec in specs if (spec.compare if spec.hash is None else spec.hash)),
        post_init=hasattr(made, "__post_init__"))
    return made


class _Table:
    """What the shared methods read of a record's fields: how __init__ assigns a field (as the dataclass's: through
    the class's __setattr__ and a subclass's property, object.__setattr__ when frozen), (name, default,
    default_factory) of each __init__ argument in order and of each field with init=False, the names shown, compared
    and hashed, and whether __post_init__ runs."""

    __slots__ = ("assign", "init", "after_init", "shown", "compared", "hashed", "post_init")

    def __init__(self, **parts: Any) -> None:
        for name, value in parts.items():
            setattr(self, name, value)


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    table = type(self).__record__
    if len(args) > len(table.init):
        raise TypeError(f"{type(self).__qualname__}.__init__() takes {len(table.init) + 1} positional arguments but "
                        f"{len(args) + 1} were given")
    assign = table.assign
    for (name, _, _), value in zip(table.init, args):
        assign(self, name, value)
    for name, default, factory in table.init[len(args):]:
        value = kwargs.pop(name) if name in kwargs else _default(default, factory)
        if value is MISSING:
            raise TypeError(f"{type(self).__qualname__}.__init__() missing 1 required argument: {name!r}")
        assign(self, name, value)
    if kwargs:
        name = next(iter(kwargs))
        given = any(name == spec[0] for spec in table.init)
        raise TypeError(f"{type(self).__qualname__}.__init__() got " + (
            f"multiple values for argument {name!r}" if given else f"an unexpected keyword argument {name!r}"))
    for name, default, factory in table.after_init:
        value = _default(default, factory)
        if value is not MISSING:
            assign(self, name, value)
    if table.post_init:
        self.__post_init__()


def _default(default: Any, factory: Any) -> Any:
    """A field's default, else a fresh value from its factory, else MISSING."""
    return default if default is not MISSING or factory is MISSING else factory()


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__record__.shown)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = type(self).__record__.compared
    return tuple(getattr(self, name) for name in compared) == tuple(getattr(other, name) for name in compared)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, name) for name in type(self).__record__.hashed))


def _refuse_assignment(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_deletion(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")
