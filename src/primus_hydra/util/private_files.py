"""Run-dir files that hold a config are readable by their owner only (mode 0600): the ones this project writes are
created so (no moment when another user could read them); Hydra's `.hydra/*.yaml` are made so right after Hydra
writes them (tasks/callback.py, on_job_start)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

PRIVATE_MODE = 0o600


def write_private_text(path: Path, text: str) -> Path:
    """Write `text` to `path`, which is created with mode 0600 (and made 0600 if it existed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_MODE)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), PRIVATE_MODE)
        handle.write(text)
    return path


def make_private(paths: Iterable[Path]) -> None:
    """chmod 0600 each of these files that exists."""
    for path in paths:
        try:
            os.chmod(path, PRIVATE_MODE)
        except FileNotFoundError:
            continue
