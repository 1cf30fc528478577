"""Importing Hydra faster, for speed only: every class and config is as before.

The command line and the Python API import Hydra inside `fast_hydra_import()`:

1. Hydra's import converts its own config (HydraConf) to OmegaConf nodes when hydra.conf stores it in the
   ConfigStore (~25 ms on a host where `import hydra` takes 0.3-0.4 s), and most commands never load it (they get
   Hydra's node from config/kept_nodes.pickle). OmegaConf's speed-ups (config/fast_omegaconf.py) are installed
   first, and the ConfigStore converts a node when it is first loaded (config/stored_nodes.py) from the
   moment its module is made, before hydra.conf stores anything.

2. `import hydra` defines ~40 dataclasses (hydra.conf's HydraConf and its parts, the defaults list's elements, the
   override parser's types, ...) and Hydra's plugin scan ~16 more (the launchers', sweepers' and samplers' configs).
   The dataclass decorator writes each class's methods as source text and compiles them: ~1 ms a class on that host,
   ~30 ms of the import. In the block, and while Hydra scans its plugins (config/fast_composition.py), a plain
   `@dataclass` of a `hydra` or `hydra_plugins` module is util/records.py's `@record`: the same dataclass (fields,
   defaults, `__init__` assigning through the class, `repr`, `==`, hashing, `__post_init__`, `dataclasses.fields`,
   OmegaConf's reading of it), made without compiling. A class that asks for more (any option, InitVar,
   keyword-only fields) and every class of another package get the standard decorator.

Where Hydra was imported before (a notebook, the tests' own process), nothing changes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import sys
from types import ModuleType
from typing import Any, Callable, Iterator, Optional

from primus_hydra.util.records import record

STANDARD_DATACLASS = dataclasses.dataclass
HYDRAS_PACKAGES = ("hydra.", "hydra_plugins.")


@contextlib.contextmanager
def fast_hydra_import() -> Iterator[None]:
    """Import Hydra in the block (items 1 and 2)."""
    from primus_hydra.config import fast_omegaconf

    fast_omegaconf.install()
    when_made = _AfterImport("hydra.core.config_store", _stores_converting_when_loaded)
    sys.meta_path.insert(0, when_made)
    try:
        with hydra_dataclasses_made_without_compiling():
            yield
    finally:
        if when_made in sys.meta_path:  # Hydra's config_store was there before
            sys.meta_path.remove(when_made)


def _stores_converting_when_loaded(config_store: ModuleType) -> None:
    from primus_hydra.config.stored_nodes import convert_stored_nodes_when_loaded

    convert_stored_nodes_when_loaded()


class _AfterImport:
    """Module `name`, found and made as the other finders would, then `then(module)` once its code has run. (A
    finder and a loader are protocols: importlib.abc's bases would import importlib.resources, tempfile, shutil, bz2
    and lzma, ~60 modules' worth of objects every later collection and the interpreter's teardown pass over.)"""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once; the other finders find it
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class _ThenLoader:
    """A module's own loader, and `then(module)` after its code runs; anything else asked of it is the loader's."""

    def __init__(self, loader: Any, then: Callable[[ModuleType], None]) -> None:
        self.loader, self.then = loader, then

    def create_module(self, spec: Any) -> Optional[ModuleType]:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package, ...
        return getattr(self.loader, name)


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
    if options or not cls.__module__.startswith(HYDRAS_PACKAGES) or _needs_the_standard_decorator(cls):
        return STANDARD_DATACLASS(cls, **options)
    return record(cls)


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
