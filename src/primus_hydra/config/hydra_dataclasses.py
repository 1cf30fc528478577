"""Hydra's dataclasses made without compiling (config/hydra_import.py's item 2), for speed only: every class is the
dataclass the standard decorator makes.

`import hydra` defines ~40 dataclasses (hydra.conf's HydraConf and its parts, the defaults list's elements, the
override parser's types, ...) and Hydra's plugin scan ~16 more (the launchers', sweepers' and samplers' configs).
The dataclass decorator writes each class's methods as source text and compiles them: ~1 ms a class on that host,
~30 ms of the import. In the block, and while Hydra scans its plugins (config/fast_composition.py), a plain
`@dataclass` of a `hydra` or `hydra_plugins` module is util/records.py's `@record`: the same dataclass (fields,
defaults, `__init__` assigning through the class, `repr`, `==`, hashing, `__post_init__`, `dataclasses.fields`,
OmegaConf's reading of it), made without compiling; `frozen=True` and `repr=False` (the override parser's
QuotedString, the defaults list's ConfigDefault and GroupDefault) too. A class that asks for more (any other
option, InitVar, keyword-only fields) and every class of another package get the standard decorator. Hydra's
classes a kept node names (config/kept_nodes.py: the launcher's and the sweeper's configs), imported when it is
read, are made the same way.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Optional

from primus_hydra.util.records import record

STANDARD_DATACLASS = dataclasses.dataclass
HYDRAS_PACKAGES = ("hydra.", "hydra_plugins.")
RECORD_OPTIONS = {"frozen": (False, True), "repr": (True, False)}  # the options util/records.py makes


@contextlib.contextmanager
def hydra_dataclasses_made_without_compiling() -> Iterator[None]:
    """`dataclasses.dataclass` is hydra_dataclass in the block, the standard decorator again after it (a module
    that imported the name in the block keeps hydra_dataclass, which gives any other package's class the standard
    decorator)."""
    if dataclasses.dataclass is hydra_dataclass:  # an enclosing block has it
        yield
        return
    dataclasses.dataclass = hydra_dataclass
    try:
        yield
    finally:
        dataclasses.dataclass = STANDARD_DATACLASS


def hydra_dataclass(cls: Optional[type] = None, /, **options: Any) -> Any:
    """`@dataclass`, a record for a plain dataclass of a Hydra module or plugin."""
    if cls is None:
        return lambda cls: hydra_dataclass(cls, **options)
    if not cls.__module__.startswith(HYDRAS_PACKAGES) or _needs_the_standard_decorator(cls) or any(
            value not in RECORD_OPTIONS.get(name, ()) or type(value) is not bool for name, value in options.items()):
        return STANDARD_DATACLASS(cls, **options)
    return record(cls, **options)


def _needs_the_standard_decorator(cls: type) -> bool:
    """Whether a class declares what util/records.py leaves to the standard decorator: InitVar and keyword-only
    fields."""
    own = vars(cls)
    for name, annotation in own.get("__annotations__", {}).items():
        text = annotation if isinstance(annotation, str) else repr(annotation)
        if "InitVar" in text or "KW_ONLY" in text:  # KW_ONLY's repr names it too
            return True
        declared = own.get(name)
        if isinstance(declared, dataclasses.Field) and declared.kw_only is True:
            return True
    return False
