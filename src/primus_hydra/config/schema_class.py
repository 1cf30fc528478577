"""The decorator of every schema class (config/schema*.py, backends/<name>/schema.py): a dataclass, as OmegaConf
reads it (fields, types, defaults) and as the native trainer holds its sections (OmegaConf.to_object, compared by
value, dataclasses.replace), made without compiling anything.

Each command imports ~40 schema classes before it composes, and the dataclass decorator compiles each class's
__init__, __repr__ and __eq__ from generated source and builds a docstring from inspect.signature where a class has
none (~1 ms a class on this machine). Here the three methods are shared functions that read dataclasses.fields at
call time (the same arguments, values and results, by keyword only), and a class without a docstring gets a short
one. docs/benchmarks.md has what that takes off a command's start-up.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeVar

SchemaType = TypeVar("SchemaType", bound=type)


def schema_class(cls: SchemaType) -> SchemaType:
    if cls.__dict__.get("__doc__") is None:
        cls.__doc__ = f"The schema {cls.__qualname__} of {cls.__module__}."
    for name, shared in (("__init__", _init_from_fields), ("__repr__", _repr_of_fields), ("__eq__", _equal_fields)):
        if name not in cls.__dict__:
            setattr(cls, name, shared)
    cls.__hash__ = None  # as a dataclass that compares by value and is not frozen
    return dataclass(init=False, repr=False, eq=False)(cls)


def _init_from_fields(self: Any, **values: Any) -> None:
    """Each field from its keyword, else its default or default factory (what a dataclass's __init__ does, by keyword
    only)."""
    for spec in fields(self):
        if spec.name in values:
            value = values.pop(spec.name)
        elif spec.default is not MISSING:
            value = spec.default
        elif spec.default_factory is not MISSING:
            value = spec.default_factory()
        else:
            raise TypeError(f"{type(self).__name__}() missing the keyword argument {spec.name!r}")
        setattr(self, spec.name, value)
    if values:
        raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments: {', '.join(sorted(values))}")


def _repr_of_fields(self: Any) -> str:
    shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in fields(self) if spec.repr)
    return f"{type(self).__qualname__}({shown})"


def _equal_fields(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = [spec.name for spec in fields(self) if spec.compare]
    return tuple(getattr(self, name) for name in compared) == tuple(getattr(other, name) for name in compared)
