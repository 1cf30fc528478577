"""A folder nobody can write, root included: a read-only bind mount over it (root, as in CI), or mode 0555 for a
normal user (whom permissions stop)."""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def read_only_folder(path: Path) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a read-only folder needs a bind mount, which this machine refuses: {mounted.stderr.strip()}")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True)
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remounted.stderr.strip()}")
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)
