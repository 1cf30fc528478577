"""The patch registry. A patch is a function of a PatchContext, registered for a backend (or all), a phase,
a priority (lower runs first), optional backend version patterns, tags and a condition."""
from __future__ import annotations

import os
from dataclasses import field
from pathlib import Path
from typing import Any, Callable, Optional

from primus_hydra.errors import PatchError
from primus_hydra.patches.versions import parse_version
from primus_hydra.util.records import record

PATCH_PHASES = ("build_args", "setup", "before_train", "after_train")


@record
class PatchContext:
    """What a patch sees. backend_args is what the trainer will receive: a dict for the external backends (edit
    it in place in build_args), frozen TorchTrainingArgs for backend=torch (replace it with dataclasses.replace)."""

    backend: str
    phase: str
    backend_version: Optional[str]
    cfg: Any  # the composed DictConfig (read-only)
    run_dir: Path
    backend_args: Any = field(default_factory=dict)
    trainer: Any = None  # set from the setup phase on
    state: dict = field(default_factory=dict)  # scratch space shared by patches of one run


@record(frozen=True)
class Patch:
    id: str
    handler: Callable[[PatchContext], None]
    phase: str
    backend: Optional[str] = None  # None: every backend
    priority: int = 50
    backend_versions: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    condition: Optional[Callable[[PatchContext], bool]] = None
    optional: bool = False  # an optional patch that fails only warns
    description: str = ""


class PatchRegistry:
    def __init__(self) -> None:
        self._patches: dict[str, Patch] = {}
        self.load_errors: list[str] = []  # failures recorded by the Hydra callback (Hydra only warns on them)
        self.loaded_modules: set[str] = set()

    def add(self, patch: Patch) -> None:
        if patch.phase not in PATCH_PHASES:
            raise PatchError(f"patch {patch.id}: phase={patch.phase!r} is not one of {', '.join(PATCH_PHASES)}")
        for pattern in patch.backend_versions:
            _check_pattern(patch.id, pattern)
        existing = self._patches.get(patch.id)
        if existing is not None and _qualname(existing.handler) != _qualname(patch.handler):
            raise PatchError(
                f"patch id {patch.id!r} is registered twice ({_qualname(existing.handler)} and {_qualname(patch.handler)})"
            )
        self._patches[patch.id] = patch

    def all(self) -> list[Patch]:
        return sorted(self._patches.values(), key=lambda p: (p.priority, p.id))

    def ids(self) -> set[str]:
        return set(self._patches)

    def clear(self) -> None:
        self._patches.clear()
        self.load_errors.clear()
        self.loaded_modules.clear()


REGISTRY = PatchRegistry()


def register_patch(
    patch_id: str,
    *,
    phase: str,
    backend: Optional[str] = None,
    priority: int = 50,
    backend_versions: Optional[list[str] | tuple[str, ...]] = None,
    tags: Optional[list[str] | tuple[str, ...]] = None,
    condition: Optional[Callable[[PatchContext], bool]] = None,
    optional: bool = False,
    description: str = "",
    registry: PatchRegistry = REGISTRY,
):
    """Decorator: `@register_patch("megatron.args.x", backend="megatron", phase="build_args")`."""

    def decorate(handler: Callable[[PatchContext], None]):
        registry.add(
            Patch(
                id=patch_id,
                handler=handler,
                phase=phase,
                backend=backend,
                priority=priority,
                backend_versions=tuple(backend_versions or ()),
                tags=tuple(tags or ()),
                condition=condition,
                optional=optional,
                description=description or (handler.__doc__ or "").strip().split("\n")[0],
            )
        )
        return handler

    return decorate


def resolve_enabled_ids(config_value: str, environ=os.environ) -> Optional[set[str]]:
    """PRIMUS_PATCHES (env) wins over `patches.enabled`. Returns None for all, an empty set for none."""
    value = (environ.get("PRIMUS_PATCHES") or config_value or "all").strip()
    if value.lower() == "all":
        return None
    if value.lower() == "none":
        return set()
    return {item.strip() for item in value.split(",") if item.strip()}


def _check_pattern(patch_id: str, pattern: str) -> None:
    parts = pattern.replace("~", " ").replace("*", "0").lstrip("<>=").split()
    if not parts or any(parse_version(part) is None for part in parts):
        raise PatchError(f"patch {patch_id}: backend_versions pattern {pattern!r} is not a version pattern")


def _qualname(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def runs_on_cpu(ctx: PatchContext) -> bool:
    """A device patch set's condition: platform.device=cpu, or auto where the worker sees no GPU."""
    device = str(ctx.cfg.platform.device)
    if device == "cpu":
        return True
    import torch  # a worker-side condition: the setup phase runs in the worker

    return device == "auto" and not torch.cuda.is_available()
