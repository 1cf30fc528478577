"""The decorator of every schema class (config/schema*.py, backends/<name>/schema.py): a dataclass as OmegaConf reads
it (fields, types, defaults, __init__ for default factories), without what no schema is used for.

Each command imports ~40 schema classes before it composes, and a dataclass is made by compiling its generated
methods: with __repr__ and __eq__ left out, and a docstring given where a class has none (the dataclass would build
one from inspect.signature), making them costs ~15 ms less of a command's start-up (docs/benchmarks.md). Schema
instances are compared and printed as OmegaConf nodes, never as dataclasses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

SchemaType = TypeVar("SchemaType", bound=type)


def schema_class(cls: SchemaType) -> SchemaType:
    if cls.__dict__.get("__doc__") is None:
        cls.__doc__ = f"The schema {cls.__qualname__} of {cls.__module__}."
    return dataclass(repr=False, eq=False)(cls)
