"""Imports the modules that register patches: the selected backend's built-in `patches` module, then the
user's `patches.modules`. Each module is tried once per process. Import failures are recorded (the Hydra callback
may not raise): preparing a job reports them as lines (patch_failures), and a worker re-raises them before its
first phase."""
from __future__ import annotations

import importlib
import importlib.util
import os

from omegaconf import DictConfig

from primus_hydra.errors import PatchError
from primus_hydra.patches.registry import REGISTRY, PatchRegistry, resolve_enabled_ids


def patch_modules_for(cfg: DictConfig) -> list[str]:
    modules = []
    builtin = f"primus_hydra.backends.{cfg.backend.name}.patches"
    if importlib.util.find_spec(f"primus_hydra.backends.{cfg.backend.name}") and importlib.util.find_spec(builtin):
        modules.append(builtin)
    modules.extend(str(name) for name in cfg.patches.modules)
    return modules


def load_patch_modules(cfg: DictConfig, registry: PatchRegistry = REGISTRY) -> None:
    """Import every patch module once; record failures in registry.load_errors instead of raising."""
    for module in patch_modules_for(cfg):
        if module in registry.loaded_modules:  # tried already (by the callback, then by the runtime)
            continue
        registry.loaded_modules.add(module)
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - reported as one line by raise_load_errors
            registry.load_errors.append(f"patches.modules: cannot import {module!r}: {type(error).__name__}: {error}")


def raise_load_errors(registry: PatchRegistry = REGISTRY) -> None:
    if registry.load_errors:
        raise PatchError("\n".join(registry.load_errors))


def patch_failures(cfg: DictConfig, registry: PatchRegistry = REGISTRY) -> list[str]:
    """Before a job starts: every patch module imports, and `patches.enabled` / PRIMUS_PATCHES name known ids."""
    load_patch_modules(cfg, registry)
    failures = list(registry.load_errors)
    selection = os.environ.get("PRIMUS_PATCHES")
    if selection is not None and not selection.replace(",", "").strip():  # ' ' or ',' would select no patch at all
        return failures + [f"PRIMUS_PATCHES={selection!r} names no patch; allowed: all, none, or a comma-separated "
                           "list of patch ids (unset it to use patches.enabled)"]
    enabled_ids = resolve_enabled_ids(str(cfg.patches.enabled))
    unknown = sorted((enabled_ids or set()) - registry.ids())
    if unknown:
        failures.append(f"PRIMUS_PATCHES / patches.enabled name unknown patch ids: {', '.join(unknown)}; "
                        f"known: {', '.join(sorted(registry.ids())) or 'none'}")
    return failures
