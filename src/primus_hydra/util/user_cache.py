"""Where primus-hydra keeps what it measured or read once for the user's later commands: `$XDG_CACHE_HOME/primus_hydra`
(`~/.cache/primus_hydra`). Each file there is a cache: deleting it only makes the next command measure or read again."""
from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "primus_hydra"
