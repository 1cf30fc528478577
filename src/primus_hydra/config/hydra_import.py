"""Importing Hydra faster, for speed only: every class and config is as before.

The command line and the Python API import Hydra inside `fast_hydra_import()`:

1. Hydra's import converts its own config (HydraConf) to OmegaConf nodes when hydra.conf stores it in the
   ConfigStore (~25 ms on a host where `import hydra` takes 0.3-0.4 s), and most commands never load it (they get
   Hydra's node from config/kept_nodes.pickle). OmegaConf's speed-ups (config/fast_omegaconf.py) are installed
   first, and the ConfigStore converts a node when it is first loaded (config/stored_nodes.py) from the
   moment its module is made, before hydra.conf stores anything.

2. `import hydra` defines ~40 dataclasses, which are made without compiling in the block
   (config/hydra_dataclasses.py).

Where Hydra was imported before (a notebook, the tests' own process), nothing changes.
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from types import ModuleType
from typing import Any, Callable, Iterator, Optional

from primus_hydra.config.hydra_dataclasses import hydra_dataclasses_made_without_compiling


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
