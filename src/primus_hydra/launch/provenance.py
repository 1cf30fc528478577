"""`<run_dir>/.primus/provenance.json`: what ran, written by the process that prepares the job, before its first step.

The record holds the command line and its overrides, the project's git commit, branch and dirty flag (the diff
against HEAD stored beside it as `git.diff`), a digest of the project's source and conf/, Python's and the
installed libraries' versions, the host, the GPU model and driver (the orchestrator's probe: vendor tools, no
torch), the Slurm job id and array index, and a fingerprint of every data file the run reads (size, mtime and a
digest of the small files: index files, not multi-GB .bin token files).

Written once, never rewritten: a later start in the same run dir (a resume, a Slurm requeue, the job's start on
its node after submission) appends an entry to `starts`, keeping every field the first start wrote. Git runs
with a short timeout; without git, or outside a checkout, its fields are null, never an error.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.config.secrets import redact_text, secret_values
from primus_hydra.launch.data_fingerprint import data_fingerprints
from primus_hydra.launch.slurm.user_code import user_code_record
from primus_hydra.util.installed import installed_versions
from primus_hydra.util.private_files import write_private_text
from primus_hydra.util.yaml_text import load_yaml

PROVENANCE_FILE = Path(".primus") / "provenance.json"
GIT_DIFF_FILE = Path(".primus") / "git.diff"
GIT_TIMEOUT_S = 5
GIT_DIFF_LIMIT = 4 * 1024 * 1024  # a bigger diff is cut there (the record says so)
PACKAGES = ("primus-hydra", "torch", "hydra-core", "omegaconf", "megatron-core", "torchtitan", "transformers",
            "tokenizers", "safetensors", "datasets", "numpy", "submitit", "hydra-submitit-launcher", "triton",
            "flash-attn", "transformer-engine")
PROJECT_ROOT = Path(__file__).resolve().parents[3]  # <repo> for a checkout (<repo>/src/primus_hydra/launch)
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def record_provenance(run_dir: Path, cfg: Optional[DictConfig], launcher: str,
                      frozen_code: Optional[dict] = None) -> Path:
    """Write the record, or append this start to the one the run dir has. Returns the file. frozen_code: the
    Slurm submission's frozen copy of the code (launch/slurm/frozen_code.py), or why there is none."""
    path = Path(run_dir) / PROVENANCE_FILE
    secrets = secret_values(cfg)  # a key typed on the command line is blanked out of the record
    existing = read_provenance(run_dir)
    git = git_state(PROJECT_ROOT)
    start = start_entry(run_dir, launcher, git)
    if frozen_code is not None:
        start["frozen_code"] = frozen_code
    if existing is None and path.exists():  # unreadable: someone's file, kept as it is
        print(f"warning: {path} is not a provenance record; left as it is, this start is not recorded",
              file=sys.stderr, flush=True)
        return path
    if existing is not None:
        existing.setdefault("starts", []).append(start)
        _write_json(path, existing, secrets)
        return path
    diff = git.pop("diff", None)
    if diff is not None:
        write_private_text(Path(run_dir) / GIT_DIFF_FILE, redact_text(diff, secrets))
        git["diff_file"] = str(GIT_DIFF_FILE)
    record = {
        "format": 1,
        "created_at": start["at"],
        "launcher": launcher,
        "command": start["command"],
        "git": git,
        "code_digest": start["code_digest"],
        "frozen_code": frozen_code,
        "python": {"version": sys.version.split()[0], "executable": sys.executable},
        "packages": package_versions(),
        "hosts": start["hosts"],
        "gpus": start["gpus"],
        "slurm": start["slurm"],
        "data": data_fingerprints(cfg) if cfg is not None else [],
        "user_code": user_code_record(cfg) if cfg is not None else {},
        "starts": [start],
    }
    _write_json(path, record, secrets)
    return path


def read_provenance(run_dir: Path) -> Optional[dict]:
    """The run dir's record; None when it has none or it cannot be read as one."""
    try:
        record = json.loads((Path(run_dir) / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def start_entry(run_dir: Path, launcher: str, git: dict) -> dict:
    from primus_hydra.orchestrator.gpu_probe import detect_gpu_driver, detect_gpu_model

    hosts = os.environ.get("SLURM_JOB_NODELIST") if "SLURM_JOB_ID" in os.environ and launcher != "slurm" else None
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "launcher": launcher,
        "pid": os.getpid(),
        "hosts": [hosts] if hosts else [socket.gethostname()],
        "command": {"argv": list(sys.argv), "cwd": os.getcwd(), "overrides": run_overrides(run_dir)},
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "code_digest": code_digest(),
        "code_path": str(PACKAGE_DIR),  # where this process imported primus_hydra from
        "gpus": {"model": detect_gpu_model(os.environ), "driver": detect_gpu_driver(os.environ)},
        "slurm": slurm_ids(),
    }


def run_overrides(run_dir: Path) -> Optional[list]:
    """The overrides as typed, from Hydra's record in the run dir (null when Hydra wrote none)."""
    try:
        overrides = load_yaml((Path(run_dir) / ".hydra" / "overrides.yaml").read_text())
    except (OSError, ValueError):
        return None
    return [str(item) for item in overrides] if isinstance(overrides, list) else None


def slurm_ids() -> Optional[dict]:
    if "SLURM_JOB_ID" not in os.environ:
        return None
    return {"job_id": os.environ["SLURM_JOB_ID"], "array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
            "array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
            "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0)}


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                                errors="replace", timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def git_state(root: Path) -> dict:
    """Commit, branch and dirty flag of the checkout at root (tracked files; untracked ones are listed), and its
    diff against HEAD; every field null outside a git checkout or without git. One `git status` answers all but
    the diff."""
    status = _git(root, "status", "--porcelain=v2", "--branch")
    headers = dict(line[2:].split(" ", 1) for line in (status or "").splitlines() if line.startswith("# "))
    commit = headers.get("branch.oid")
    if status is None or commit in (None, "(initial)"):
        return {"repo": None, "commit": None, "branch": None, "dirty": None, "untracked": None}
    lines = status.splitlines()
    changed = [line for line in lines if line[:2] in ("1 ", "2 ", "u ")]
    untracked = [line[2:] for line in lines if line.startswith("? ")]
    branch = headers.get("branch.head")
    state = {"repo": str(root), "commit": commit, "branch": None if branch in (None, "(detached)") else branch,
             "dirty": bool(changed), "untracked": untracked[:100]}
    diff = _git(root, "diff", "HEAD") if changed else None
    if diff is not None:
        state["diff_truncated"] = len(diff) > GIT_DIFF_LIMIT
        state["diff"] = diff[:GIT_DIFF_LIMIT]
    return state


def code_digest() -> str:
    """sha256 of the project's Python source and YAML configs (paths and contents, in a fixed order)."""
    digest = hashlib.sha256()
    roots = [PACKAGE_DIR] + ([PROJECT_ROOT / "conf"] if (PROJECT_ROOT / "conf").is_dir() else [])
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts):
            digest.update(f"{path.relative_to(root.parent)}\0".encode())
            digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()


def package_versions() -> dict[str, str]:
    return {name: version for name, version in installed_versions(PACKAGES).items() if version is not None}


def _write_json(path: Path, record: dict[str, Any], secrets: set[str]) -> None:
    tmp = path.with_suffix(f".tmp.{os.getpid()}")  # whole or not at all: a reader never sees half
    write_private_text(tmp, redact_text(json.dumps(record, indent=2, default=str), secrets) + "\n")
    tmp.replace(path)

