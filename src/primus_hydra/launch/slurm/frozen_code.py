"""The project's code frozen at Slurm submission, so that a job that waits in the queue (or is requeued days later)
runs the code it was submitted with, not whatever is on disk when it starts.

What is frozen: in a git checkout, the files of src/ and conf/ as git sees the working tree (tracked, and untracked
but not ignored: edits included); outside git, the installed package and its Hydra plugins. The copy goes into a
content-addressed store, `<sweep or run dir>/.primus_code/<digest>/`, which every point of a sweep shares; the
job's sbatch script puts its `src/` first on PYTHONPATH, so the nodes import primus_hydra (and read conf/) from
the copy, and so does every rerun of the same script (a Slurm requeue, submitit's requeue after preemption).
The user's own code the jobs import by path (a `_target_` package outside site-packages, `backend.path`) goes into
the same entry (launch/slurm/user_code.py). `launch.freeze_code=false` runs the code in place, and the provenance
record says so.
"""
from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from primus_hydra.backends.base import FROZEN_BACKEND_ENV
from primus_hydra.errors import PrimusError
from primus_hydra.launch.frozen_user_path import FROZEN_USER_ENV
from primus_hydra.launch.provenance import PACKAGE_DIR, PROJECT_ROOT
from primus_hydra.launch.slurm.user_code import BACKEND_DIR, USER_DIR, files_digest, git_listed, kept, user_code_files

STORE_DIR = ".primus_code"
FILE_LIMIT_BYTES = 8 * 1024 * 1024  # a bigger file in src/ or conf/ is refused, named
TOTAL_LIMIT_BYTES = 64 * 1024 * 1024
COMPLETE_MARK = ".complete"  # written last: a copy without it was cut short and is made again


@dataclass(frozen=True)
class FrozenCode:
    path: Path  # the store entry; its src/ goes first on PYTHONPATH
    digest: str
    files: int
    bytes: int
    made: bool  # this submission made it (removed again when the submission fails)
    user: Optional[dict] = None  # the user's code frozen with it: {user_packages: {name: from}, backend_path: from}

    @property
    def setup_lines(self) -> list[str]:
        user = self.user or {}
        lines = [f'export PYTHONPATH="{self.path / "src"}${{PYTHONPATH:+:$PYTHONPATH}}"']
        if user.get("user_packages"):  # first on sys.path, before the job's working directory (the entry puts it)
            lines.append(f'export {FROZEN_USER_ENV}="{self.path / USER_DIR}"')
        if user.get("backend_path"):
            lines.append(f'export {FROZEN_BACKEND_ENV}="{self.path / BACKEND_DIR / Path(user["backend_path"]).name}"')
        return lines

    def record(self) -> dict:
        return {"path": str(self.path), "digest": self.digest, "files": self.files, "bytes": self.bytes,
                **(self.user or {})}


def code_files() -> dict[str, Path]:
    """relative path in the copy -> the file: src/ and conf/ of a git checkout as its working tree has them, else
    the installed package and its primus Hydra plugins."""
    listed = _git_listed(PROJECT_ROOT)
    if listed is not None:
        return {rel: PROJECT_ROOT / rel for rel in listed
                if (PROJECT_ROOT / rel).is_file() and ".egg-info" not in rel and kept(rel)}
    roots = [PACKAGE_DIR] + sorted((PACKAGE_DIR.parent / "hydra_plugins").glob("primus_*"))
    files = {}
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and kept(str(path.relative_to(root))):
                files[str(Path("src") / path.relative_to(PACKAGE_DIR.parent))] = path
    return files


def _git_listed(root: Path) -> Optional[list[str]]:
    if not (root / "src" / "primus_hydra").is_dir():
        return None
    return git_listed(root, "src", "conf", timeout_s=10)


def freeze_project_code(base_dir: Path, cfgs: Iterable = ()) -> FrozenCode:
    """The store entry holding this code and the user's code the jobs' configs (`cfgs`) import by path (made when no
    complete one has the same digest). PrimusError (one line) when a file or the whole exceeds the limits, before
    anything is copied."""
    user_files, user = user_code_files(list(cfgs))
    files = {**code_files(), **user_files}
    sizes = {rel: path.stat().st_size for rel, path in files.items()}
    too_big = sorted((rel for rel, size in sizes.items() if size > FILE_LIMIT_BYTES), key=lambda rel: -sizes[rel])
    if too_big:
        named = ", ".join(f"{rel} ({sizes[rel] / 2**20:.1f} MiB)" for rel in too_big[:5])
        raise PrimusError(f"launch.freeze_code=true: {named} exceed the {FILE_LIMIT_BYTES // 2**20} MiB a frozen "
                          "file may have; move them out of the frozen code (or git-ignore them), or set "
                          "launch.freeze_code=false")
    total = sum(sizes.values())
    if total > TOTAL_LIMIT_BYTES:
        where = "src/ and conf/" + (f" and {', '.join(_user_sources(user))}" if user else "")
        raise PrimusError(f"launch.freeze_code=true: {where} hold {total / 2**20:.1f} MiB, over the "
                          f"{TOTAL_LIMIT_BYTES // 2**20} MiB a frozen copy may have; remove what the job does not "
                          "need, or set launch.freeze_code=false")
    name = files_digest(files).removeprefix("sha256:")
    target = Path(base_dir).resolve() / STORE_DIR / name[:16]
    if (target / COMPLETE_MARK).is_file():
        return FrozenCode(target, f"sha256:{name}", len(files), total, made=False, user=user or None)
    staging = target.with_name(f"{target.name}.tmp.{uuid.uuid4().hex[:8]}")
    for rel, path in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, staging / rel)
    (staging / COMPLETE_MARK).write_text(f"sha256:{name}\n")
    if target.exists():  # an incomplete copy from an interrupted submission
        shutil.rmtree(target)
    os.replace(staging, target)
    return FrozenCode(target, f"sha256:{name}", len(files), total, made=True, user=user or None)


def _user_sources(user: dict) -> list[str]:
    return [*user.get("user_packages", {}).values(), *([user["backend_path"]] if user.get("backend_path") else [])]


def remove_frozen(frozen: Optional[FrozenCode]) -> None:
    """A failed submission leaves nothing behind: the store entry it made, and the store if that emptied it."""
    if frozen is None or not frozen.made:
        return
    shutil.rmtree(frozen.path, ignore_errors=True)
    try:
        frozen.path.parent.rmdir()
    except OSError:
        pass
