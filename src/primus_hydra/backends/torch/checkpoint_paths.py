"""The layout of a checkpoints folder, read without torch (the orchestrator checks resume/load paths with it):
`step_NNNNNNN/` folders, each complete once its meta.json exists, and the `latest` pointer (see checkpoint.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from primus_hydra.errors import CheckpointError

LATEST = "latest"
META = "meta.json"
TRAINER_STATE = "trainer_state.pt"


def step_dir_name(step: int) -> str:
    return f"step_{step:07d}"


class CheckpointFolder:
    """A checkpoints folder: its complete steps, `latest`, and checkpoint paths a user names."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(p.name[5:]) for p in self.root.glob("step_*") if p.name[5:].isdigit() and (p / META).is_file())

    def latest(self) -> Optional[Path]:
        pointer = self.root / LATEST
        if not pointer.is_file():
            return None
        target = self.root / pointer.read_text().strip()
        return target if (target / META).is_file() else None

    def unresumed_failure(self, resume: Optional[str]) -> Optional[str]:
        """A fresh start (resume=None) into a folder that already holds checkpoints would overwrite them."""
        existing = self.steps()
        if resume is not None or not existing:
            return None
        return (f"module.checkpoint.dir={self.root} already holds checkpoints (step {existing[-1]}); "
                f"set module.checkpoint.resume=auto to continue from them, or choose another dir")

    def resolve(self, spec: Optional[str], key: str) -> Optional[Path]:
        """`auto`: the latest here, or None for a fresh start. A path: a step folder or a checkpoints root."""
        if spec is None:
            return None
        if spec == "auto":
            return self.latest()
        path = Path(spec).expanduser()
        if (path / META).is_file():
            return path
        if (path / LATEST).is_file():
            target = CheckpointFolder(path).latest()
            if target is None:
                raise CheckpointError(f"{key}={spec}: its `latest` points to a missing or incomplete checkpoint")
            return target
        if not path.exists():
            raise CheckpointError(f"{key}={spec}: no such checkpoint (give a step_* folder, a checkpoints folder, or auto)")
        raise CheckpointError(f"{key}={spec}: not a checkpoint (no {META} and no `{LATEST}` inside)")

    @staticmethod
    def verify(path: Path, key: str) -> dict[str, Any]:
        """meta.json, and every file it lists present with its recorded size."""
        try:
            meta = json.loads((path / META).read_text())
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{key}: {path / META} is unreadable or corrupt ({error})") from error
        for name, expected in meta.get("files", {}).items():
            file = path / name
            if not file.is_file():
                raise CheckpointError(f"{key}: {file} is missing (incomplete checkpoint)")
            if file.stat().st_size != expected:
                raise CheckpointError(f"{key}: {file} has {file.stat().st_size} bytes, expected {expected} (truncated or corrupt)")
        return meta
