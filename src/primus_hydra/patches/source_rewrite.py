"""Two tools for patches that must change a library's behaviour inside its own functions.

`rewrite_function` recompiles one function from its source with exact text replacements (each must be found once,
else the patch fails naming the text: the library changed and the patch needs a look). The new function keeps the
file name and line numbers of the original, so tracebacks still point into the library.

`scoped_module_proxy` builds a stand-in for a module (e.g. `torch`) that differs in a few attributes; a patch sets it
as a library module's global, so the change holds for that library's code only, never for the rest of the process.
"""
from __future__ import annotations

import inspect
import sys
import textwrap
import types
from typing import Any, Callable

from primus_hydra.errors import PatchError


def rewrite_function(owner: Any, name: str, replacements: dict[str, str], rebind_prefix: str = "") -> Callable:
    """Replace `owner.name` (a module-level function, or a method, staticmethod or classmethod of a class) by the
    same source with `replacements` applied. A module-level function is also rebound in every module under
    `rebind_prefix` that imported it by name. Returns the new function."""
    static = inspect.getattr_static(owner, name)
    kind = type(static) if isinstance(static, (staticmethod, classmethod)) else None
    original = inspect.unwrap(static.__func__ if kind else static)  # a decorated function: its source has the decorator
    installed = static.__func__ if kind else static
    source = textwrap.dedent(inspect.getsource(original))
    for old, new in replacements.items():
        count = source.count(old)
        if count != 1:
            raise PatchError(f"{original.__module__}.{original.__qualname__}: expected {old!r} once in its source, "
                             f"found it {count} times (the library changed; this patch needs updating)")
        source = source.replace(old, new)
    free = original.__code__.co_freevars  # e.g. __class__ for a method that calls super()
    factory = f"def _factory({', '.join(free)}):\n{textwrap.indent(source, '    ')}\n    return {original.__name__}\n"
    padding = "\n" * max(original.__code__.co_firstlineno - 2, 0)  # the def keeps its line number
    namespace: dict = {}
    exec(compile(padding + factory, inspect.getsourcefile(original) or "<rewritten>", "exec"), original.__globals__, namespace)
    rewritten = namespace["_factory"](*(cell.cell_contents for cell in original.__closure__ or ()))
    rewritten.__qualname__, rewritten.__doc__ = original.__qualname__, original.__doc__
    rewritten.__wrapped_original__ = original
    setattr(owner, name, kind(rewritten) if kind else rewritten)
    if not isinstance(owner, type) and rebind_prefix:
        for module in modules_under(rebind_prefix):
            if module.__dict__.get(name) is installed:
                setattr(module, name, rewritten)
    return rewritten


def modules_under(prefix: str) -> list[types.ModuleType]:
    """The imported modules named `prefix` or `prefix.*`."""
    return [module for key, module in list(sys.modules.items())
            if module is not None and (key == prefix or key.startswith(prefix + "."))]


def scoped_module_proxy(module: types.ModuleType, name: str, overrides: dict[str, Any]) -> types.ModuleType:
    """A module object with every public attribute of `module`, except `overrides`."""
    proxy = types.ModuleType(name, module.__doc__)
    proxy.__dict__.update({key: value for key, value in vars(module).items() if not key.startswith("__")})
    proxy.__dict__.update(overrides)
    return proxy


def replace_module_global(prefix: str, global_name: str, original: Any, replacement: Any) -> int:
    """Set `global_name` to `replacement` in every module under `prefix` whose global is `original`; the count."""
    count = 0
    for module in modules_under(prefix):
        if module.__dict__.get(global_name) is original:
            setattr(module, global_name, replacement)
            count += 1
    return count
