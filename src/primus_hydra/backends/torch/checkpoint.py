"""Atomic checkpoints: write into a temp folder, rename it to step_NNNNNNN, then update `latest` (also by rename).

A crash at any moment leaves either the previous `latest` or the new one, never a half-written checkpoint
behind the pointer. Existing checkpoints are never overwritten.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

import torch

from primus_hydra.errors import CheckpointError

LATEST = "latest"
META = "meta.json"
STATE_FILES = ("model.pt", "optimizer.pt", "trainer_state.pt")


def step_dir_name(step: int) -> str:
    return f"step_{step:07d}"


class CheckpointManager:
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

    def save(self, step: int, states: dict[str, Any], meta: dict[str, Any]) -> Path:
        final = self.root / step_dir_name(step)
        if final.exists():
            raise CheckpointError(f"checkpoint {final} already exists; refusing to overwrite it")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        sizes = {}
        for file_name in STATE_FILES:
            torch.save(states[file_name], tmp / file_name)
            sizes[file_name] = (tmp / file_name).stat().st_size
        (tmp / META).write_text(json.dumps({**meta, "step": step, "files": sizes}, indent=2))
        _fsync_dir(tmp)
        os.rename(tmp, final)
        pointer_tmp = self.root / f".{LATEST}.tmp-{os.getpid()}"
        pointer_tmp.write_text(final.name + "\n")
        os.replace(pointer_tmp, self.root / LATEST)
        _fsync_dir(self.root)
        return final

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
            target = CheckpointManager(path).latest()
            if target is None:
                raise CheckpointError(f"{key}={spec}: its `latest` points to a missing or incomplete checkpoint")
            return target
        if not path.exists():
            raise CheckpointError(f"{key}={spec}: no such checkpoint (give a step_* folder, a checkpoints folder, or auto)")
        raise CheckpointError(f"{key}={spec}: not a checkpoint (no {META} and no `{LATEST}` inside)")

    @staticmethod
    def load(path: Path, key: str, map_location: torch.device) -> tuple[dict[str, Any], dict[str, Any]]:
        """(meta, states). Any missing, truncated or unreadable file is a CheckpointError naming it."""
        try:
            meta = json.loads((path / META).read_text())
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{key}: {path / META} is unreadable or corrupt ({error})") from error
        states = {}
        for file_name in STATE_FILES:
            file = path / file_name
            expected = meta.get("files", {}).get(file_name)
            if not file.is_file():
                raise CheckpointError(f"{key}: {file} is missing (incomplete checkpoint)")
            if expected is not None and file.stat().st_size != expected:
                raise CheckpointError(f"{key}: {file} has {file.stat().st_size} bytes, expected {expected} (truncated or corrupt)")
            try:
                states[file_name] = torch.load(file, map_location=map_location, weights_only=False)
            except Exception as error:  # noqa: BLE001 - any unpickling failure means a corrupt file
                raise CheckpointError(f"{key}: {file} cannot be loaded ({type(error).__name__}: {error})") from error
        return meta, states


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
