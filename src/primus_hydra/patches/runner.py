"""Puts the registered patches to work. Their modules are imported first: the selected backend's built-in `patches`
module, then the user's `patches.modules`, each tried once per process. An import failure is recorded, not raised
(the Hydra callback that imports them at job start may not raise): preparing a job reports it as a line
(patch_failures), and a worker raises it before its first phase. A phase runs its patches filtered by backend,
phase, PRIMUS_PATCHES, version and condition, in priority order; a failing patch fails the run unless it is
optional."""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.errors import PatchError
from primus_hydra.patches.registry import REGISTRY, Patch, PatchContext, PatchRegistry, resolve_enabled_ids
from primus_hydra.patches.versions import any_version_matches

log = logging.getLogger(__name__)


# -- the modules that register patches --------------------------------------------------------------------------
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


# -- one phase ------------------------------------------------------------------------------------------------------
def select_patches(ctx: PatchContext, enabled_ids: Optional[set[str]], registry: PatchRegistry = REGISTRY) -> list[Patch]:
    selected = []
    for patch in registry.all():
        if patch.phase != ctx.phase or patch.backend not in (None, ctx.backend):
            continue
        if enabled_ids is not None and patch.id not in enabled_ids:
            continue
        if not any_version_matches(ctx.backend_version, patch.backend_versions):
            log.debug("patch %s skipped: backend version %s not in %s", patch.id, ctx.backend_version, patch.backend_versions)
            continue
        if patch.condition is not None and not patch.condition(ctx):
            continue
        selected.append(patch)
    return selected


def run_patches(ctx: PatchContext, enabled_ids: Optional[set[str]], registry: PatchRegistry = REGISTRY) -> list[str]:
    """Run the phase's patches in priority order; returns the ids that ran."""
    applied = []
    for patch in select_patches(ctx, enabled_ids, registry):
        try:
            patch.handler(ctx)
        except Exception as error:
            message = f"patch {patch.id} ({ctx.phase}) failed: {type(error).__name__}: {error}"
            if not patch.optional:
                raise PatchError(message) from error
            log.warning("%s (optional patch, continuing)", message)
            continue
        log.info("patch applied: %s [%s]", patch.id, ctx.phase)
        applied.append(patch.id)
    return applied
