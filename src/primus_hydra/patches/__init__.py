"""Patch registry: named, phase- and version-gated changes to a backend, registered with @register_patch."""
from primus_hydra.patches.registry import PATCH_PHASES, PatchContext, register_patch

__all__ = ["PATCH_PHASES", "PatchContext", "register_patch"]
