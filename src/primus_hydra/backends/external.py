"""What the adapters of the external backends (megatron, torchtitan, maxtext, megatron_bridge, hummingbirdxt)
share: plain values out of the typed config, `backend.extra_args` merged last,
the base adapter (the stages a backend trains, source sub-folders on sys.path, what a run needs before it
starts).

Nothing here imports torch or a backend library: adapters are imported on the launcher side too.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.backends.base import BackendAdapter, BaseTrainer
from primus_hydra.backends.extra_args_owners import owned_extra_args_failures
from primus_hydra.backends.translation import translate
from primus_hydra.config.targets import load_target
from primus_hydra.config.values import to_plain
from primus_hydra.errors import BackendUnavailableError


def merge_extra_args(native: dict, extra: Any) -> dict:
    """`backend.extra_args` on top of the translated arguments (the user wins); nested dicts merge key by key."""
    merged = dict(native)
    for key, value in (to_plain(extra) or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_extra_args(merged[key], value)
        else:
            merged[key] = value
    return merged


def wants_checkpoints(cfg: DictConfig) -> bool:
    """Whether the run saves any checkpoint (periodically or at the end)."""
    ckpt = cfg.module.checkpoint
    return bool(ckpt.interval or ckpt.save_final)


def checkpoint_load_path(cfg: DictConfig) -> Optional[str]:
    """The checkpoint to start from: module.checkpoint.load (weights only) or an explicit resume path."""
    ckpt = cfg.module.checkpoint
    if ckpt.load:
        return str(ckpt.load)
    if ckpt.resume not in (None, "auto"):
        return str(ckpt.resume)
    return None


def size_tag(model_name: str) -> Optional[str]:
    """The size in a preset name, upper-cased as torchtitan/Megatron-Bridge flavors write it: llama3.1_8b -> 8B."""
    match = re.search(r"(\d+(?:x\d+)?(?:\.\d+)?[bm](?:_a\d+(?:\.\d+)?b)?)$", model_name, re.IGNORECASE)
    return match.group(1).upper().replace("_", "-").replace("X", "x") if match else None


class ExternalBackendAdapter(BackendAdapter):
    """An adapter that translates the canonical config into another library's arguments.

    Subclasses set `stages` (the module.stage values the backend trains), `library` (what a real run drives),
    `trainer_classes` (each stage's trainer class; empty while only the arguments are translated: a real run then
    stops before it starts, unless backend.trainer names a trainer) and, for source checkouts whose importable
    package sits in a sub-folder (e.g. maxtext's src/), `source_subdirs`.
    """

    stages: tuple[str, ...] = ()
    library: str = ""
    trainer_classes: dict[str, str] = {}  # {stage: "module.Class"}; empty: only the arguments are translated
    source_subdirs: tuple[str, ...] = ()
    reads_native_data = False  # True: the trainer reads backend=torch's data sources (stdlib text fallback included)
    reads_indexed_data = False  # True: the trainer reads Megatron's indexed datasets (module.data.source=indexed)

    @property
    def stage(self) -> str:
        return str(self.cfg.module.stage)

    def source_paths(self, root: Path) -> list[Path]:
        return [root] + [root / subdir for subdir in self.source_subdirs if (root / subdir).is_dir()]

    def validate(self) -> list[str]:
        failures = []
        if self.stage not in self.stages:
            failures.append(
                f"module.stage={self.stage}: backend={self.name} supports {', '.join(self.stages)}; "
                f"pick the module preset with that stage (module=pre_trainer: pretrain, module=post_trainer: sft)"
            )
        data = self.cfg.module.data
        if data.source == "text" and not data.path and not self.reads_native_data:
            # the stdlib-sources fallback is a feature of the built-in torch backend only
            failures.append(
                f"module.data.source=text needs module.data.path with backend={self.name} (only backend=torch "
                f"falls back to Python's own sources); set module.data.source=mock or module.data.path=..."
            )
        if data.source == "indexed" and not self.reads_indexed_data:
            failures.append(f"module.data.source=indexed: backend={self.name} does not read Megatron's indexed "
                            f"datasets (backend=torch, megatron and torchtitan do)")
        return failures + self.peft_failures() + owned_extra_args_failures(self)

    def training_failures(self) -> list[str]:
        if not self.trainer_classes and not self.cfg.backend.trainer:  # backend.trainer: the user brings one
            return [self.not_integrated()]
        return super().training_failures()

    def not_integrated(self) -> str:
        return (f"backend={self.name}: training through {self.library} is not integrated yet in this release; "
                f"task.dry_run=true exports the translated arguments to backend_args.yaml in the run dir")

    def arguments_after_patches(self) -> Any:
        """The translated arguments as the trainer will get them: after the enabled build_args patches (the checks
        made before launch read these, so that a patch that renames a key is seen there too). Made once: the job's
        prepare() makes them first and hands the same to the workers."""
        if self.translation is None:
            self.translation = translate(self, self.run_dir or Path("."), quiet=True)
        return self.translation.arguments

    def load_trainer_class(self, stage: str) -> type[BaseTrainer]:
        if not self.trainer_classes:
            raise BackendUnavailableError(self.not_integrated())
        return load_target(self.trainer_classes[stage], "backend trainer")
