"""The user's own code that a Slurm job imports by path, frozen beside the project's (launch/slurm/frozen_code.py).

A job imports code of the user's in two ways the submission can see: an import path in the config (any `_target_`,
`backend.trainer`, `patches.modules`) whose top-level package is found outside site-packages, the standard library
and this project (a package beside the user's command, or on their PYTHONPATH), and a backend source tree given as
`backend.path`. Both are copied into the frozen store entry: the packages under `user/` (first on the job's
PYTHONPATH), the tree under `backend/` (the adapter reads it from there, PRIMUS_FROZEN_BACKEND_PATH). Finding a
package never runs it: `importlib.util.find_spec` of a top-level name only looks.
"""
from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterable, Optional

from omegaconf import DictConfig, OmegaConf

USER_DIR, BACKEND_DIR = "user", "backend"
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # primus_hydra: the project's own code, frozen as src/
SKIPPED_PARTS = {"__pycache__", ".git"}


def _import_paths(cfg: DictConfig) -> set[str]:
    """Every dotted import path the job's config names."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "_target_" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(OmegaConf.to_container(cfg, resolve=False))  # unresolved: reading a key never runs a resolver
    backend = cfg.get("backend") or {}
    if isinstance(backend.get("trainer"), str):
        found.add(backend.trainer)
    found.update(str(name) for name in (cfg.get("patches") or {}).get("modules") or [])
    return found


def _outside_environment(path: Path) -> bool:
    """Not in the interpreter's own library, its site-packages, or this project."""
    paths = sysconfig.get_paths()
    installed = {Path(paths[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    resolved = path.resolve()
    return not any(resolved.is_relative_to(root) for root in installed | {PACKAGE_DIR.parent.resolve()})


def user_package_roots(cfgs: Iterable[DictConfig]) -> dict[str, Path]:
    """top-level name -> its package folder (or module file), for the user's code the configs import."""
    roots: dict[str, Path] = {}
    for cfg in cfgs:
        for dotted in _import_paths(cfg):
            top = dotted.split(".")[0]
            if not top or top in roots or top in sys.builtin_module_names:
                continue
            try:
                spec = importlib.util.find_spec(top)
            except (ImportError, ValueError):
                continue
            if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
                if spec is not None and spec.submodule_search_locations:  # a namespace package: its first folder
                    folder = Path(list(spec.submodule_search_locations)[0])
                    if _outside_environment(folder):
                        roots[top] = folder
                continue
            origin = Path(spec.origin)
            root = origin.parent if spec.submodule_search_locations else origin
            if _outside_environment(root):
                roots[top] = root
    return roots


def backend_tree(cfgs: Iterable[DictConfig]) -> Optional[Path]:
    """The backend source tree the jobs name with backend.path (one for all; None: none named)."""
    named = {str(Path(str(cfg.backend.path)).expanduser().resolve()) for cfg in cfgs
             if cfg.get("backend") is not None and cfg.backend.get("path")}
    return Path(sorted(named)[0]) if len(named) == 1 else None


def git_listed(root: Path, *paths: str, timeout_s: float = 30) -> Optional[list[str]]:
    """The files under `root` (or its `paths`) as git sees the working tree: tracked, and untracked but not ignored;
    None outside a git work tree."""
    try:
        done = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "-co", "--exclude-standard", "--", *paths],
                              capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return sorted({name for name in done.stdout.decode(errors="replace").split("\0") if name})


def kept(relative: str) -> bool:
    """Not a cache or a repository's own files."""
    return not SKIPPED_PARTS & set(Path(relative).parts) and not relative.endswith(".pyc")


def files_digest(files: dict[str, Path]) -> str:
    """sha256 over each file's relative path and bytes, in path order."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0".encode())
        digest.update(files[rel].read_bytes())
    return f"sha256:{digest.hexdigest()}"


def files_under(root: Path) -> dict[str, Path]:
    """relative path -> file of a folder (as git sees its working tree when it is in one) or of one module file."""
    if root.is_file():
        return {root.name: root}
    listed = git_listed(root)
    if listed is not None:
        return {name: root / name for name in listed if (root / name).is_file() and kept(name)}
    return {str(path.relative_to(root)): path for path in root.rglob("*")
            if path.is_file() and kept(str(path.relative_to(root)))}


def user_code_record(cfg: DictConfig) -> dict:
    """What a run's record says of the user's code it imports by path: where each part is, and a digest of the
    packages' files (a backend.path tree, often a whole Megatron-LM checkout, is named, not read at every start; a
    Slurm job's frozen copy of both is recorded beside it)."""
    files, record = user_code_files([cfg])
    files = {rel: path for rel, path in files.items() if rel.startswith(f"{USER_DIR}/")}
    if files:
        record["digest"] = files_digest(files)
    return record


def user_code_files(cfgs: list[DictConfig]) -> tuple[dict[str, Path], dict]:
    """(relative path in the frozen copy -> file, the record of what was found) for the jobs' configs."""
    files: dict[str, Path] = {}
    record: dict = {}
    packages = user_package_roots(cfgs)
    for root in sorted(packages.values()):
        for rel, path in files_under(root).items():
            files[str(Path(USER_DIR) / (rel if root.is_file() else Path(root.name) / rel))] = path
    if packages:
        record["user_packages"] = {top: str(root) for top, root in sorted(packages.items())}
    tree = backend_tree(cfgs)
    if tree is not None and tree.is_dir():
        for rel, path in files_under(tree).items():
            files[str(Path(BACKEND_DIR) / tree.name / rel)] = path
        record["backend_path"] = str(tree)
    return files, record
