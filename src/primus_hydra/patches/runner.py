"""Runs the patches of one phase: filter by backend, phase, PRIMUS_PATCHES, version and condition; sort by
priority; a failing patch fails the run unless it is optional."""
from __future__ import annotations

import logging
from typing import Optional

from primus_hydra.errors import PatchError
from primus_hydra.patches.registry import REGISTRY, Patch, PatchContext, PatchRegistry
from primus_hydra.patches.versions import any_version_matches

log = logging.getLogger(__name__)


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
