"""Importing Hydra faster, for speed only: every class and config is as before.

The command line and the Python API import Hydra inside `fast_hydra_import()`:

1. Hydra's import converts its own config (HydraConf) to OmegaConf nodes when hydra.conf stores it in the
   ConfigStore (~25 ms on a host where `import hydra` takes 0.3-0.4 s), and most commands never load it (they get
   Hydra's node from config/kept_nodes.pickle). OmegaConf's speed-ups (config/fast_omegaconf.py) are installed
   first, and the ConfigStore converts a node when it is first loaded (config/stored_nodes.py) from the
   moment its module is made, before hydra.conf stores anything.

2. `import hydra` defines ~40 dataclasses, which are made without compiling in the block
   (config/hydra_dataclasses.py).

3. OmegaConf's import imports PyYAML, whose pure-Python reader compiles a regular expression of every non-printable
   character at import (`Reader.NON_PRINTABLE`: ~9 ms on that host, more than any other module's), which only a
   YAML text read by the pure-Python loader uses (this project and its OmegaConf read with libyaml's). It is compiled
   when first used: the same pattern, the same matches.

Where Hydra was imported before (a notebook, the tests' own process), nothing changes.
"""
from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
from types import ModuleType
from typing import Any, Callable, Iterator, Optional

from primus_hydra.config.hydra_dataclasses import hydra_dataclasses_made_without_compiling


@contextlib.contextmanager
def fast_hydra_import() -> Iterator[None]:
    """Import Hydra in the block (items 1, 2 and 3)."""
    hooks = [_ImportHook("hydra.core.config_store", then=_stores_converting_when_loaded),
             _ImportHook("yaml.reader", during=_patterns_compiled_when_used)]  # OmegaConf's import imports it
    sys.meta_path[:0] = hooks
    try:
        from primus_hydra.config import fast_omegaconf

        fast_omegaconf.install()
        with hydra_dataclasses_made_without_compiling():
            yield
    finally:
        for hook in hooks:
            if hook in sys.meta_path:  # the module was imported before
                sys.meta_path.remove(hook)


def _stores_converting_when_loaded(config_store: ModuleType) -> None:
    from primus_hydra.config.stored_nodes import convert_stored_nodes_when_loaded

    convert_stored_nodes_when_loaded()


@contextlib.contextmanager
def _patterns_compiled_when_used(module: ModuleType) -> Iterator[None]:
    """While `module`'s code runs, a pattern it compiles (re.compile called from its code) is compiled when used."""
    compile_now = re.compile

    def compile_when_used(pattern: Any, flags: int = 0) -> Any:
        if sys._getframe(1).f_globals.get("__name__") != module.__name__:  # another module, another thread
            return compile_now(pattern, flags)
        return PatternCompiledWhenUsed(pattern, flags)

    re.compile = compile_when_used
    try:
        yield
    finally:
        re.compile = compile_now


class PatternCompiledWhenUsed:
    """`re.compile(pattern, flags)`, compiled the first time any of its attributes (search, match, ...) is used."""
    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern: Any, flags: int = 0) -> None:
        self._pattern, self._flags, self._compiled = pattern, flags, None

    def __getattr__(self, name: str) -> Any:
        if self._compiled is None:
            self._compiled = re.compile(self._pattern, self._flags)
        return getattr(self._compiled, name)


class _ImportHook:
    """Module `name`, found and made as the other finders would, its code run inside `during(module)` and followed by
    `then(module)`; once. (A finder and a loader are protocols: importlib.abc's bases would import
    importlib.resources, tempfile, shutil, bz2 and lzma, ~60 modules' worth of objects every later collection and the
    interpreter's teardown pass over.)"""

    def __init__(self, name: str, then: Optional[Callable[[ModuleType], None]] = None,
                 during: Optional[Callable[[ModuleType], Any]] = None) -> None:
        self.name, self.then, self.during = name, then, during

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once; the other finders find it
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _HookedLoader(spec.loader, self)
        return spec


class _HookedLoader:
    """A module's own loader, its code run as an _ImportHook says; anything else asked of it is the loader's."""

    def __init__(self, loader: Any, hook: _ImportHook) -> None:
        self.loader, self.hook = loader, hook

    def create_module(self, spec: Any) -> Optional[ModuleType]:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with self.hook.during(module) if self.hook.during else contextlib.nullcontext():
            self.loader.exec_module(module)
        if self.hook.then:
            self.hook.then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package, ...
        return getattr(self.loader, name)
