"""A job's translated arguments: its backend's native arguments (the adapter's convert_config) after the enabled
build_args patches. The job's prepare() makes them once; its workers get them in the job config
(launch/job_config.py) and do not translate again.

A worker takes them as they are only when they were made for the backend library it has installed and for the
config it runs. A Slurm node may have another release of the library than the submitting machine (a build_args
patch is chosen by the library's version), or may change the config (its own plan of the `auto` knobs, a requeue's
resume): it then translates again, with its own library, and its log says why. Translating again is what every
worker did before the arguments were shipped, so this is never less safe than refusing, and a job still runs.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Optional

from omegaconf import OmegaConf

from primus_hydra.backends.base import BackendAdapter
from primus_hydra.config.values import to_plain
from primus_hydra.patches.registry import PatchContext, resolve_enabled_ids
from primus_hydra.patches.runner import run_patches
from primus_hydra.util.records import record


@record(frozen=True)
class Translation:
    arguments: Any  # as the trainer reads them (typed), or their plain form as a job config holds them
    library_version: Optional[str]  # the installed backend library they were made for (None: none, or it ships here)
    config_digest: str  # of the config they were made from (config_digest)
    patches: tuple[str, ...] = ()  # the build_args patches that changed them, in order

    def plain(self) -> dict:
        """The YAML-safe form a job config holds (from_plain reads it back)."""
        return {"for": {"library_version": self.library_version, "config_digest": self.config_digest},
                "patches": list(self.patches), "arguments": to_plain(self.arguments)}

    @classmethod
    def from_plain(cls, document: dict) -> Translation:
        """A job config's translation; its arguments stay plain until the worker's adapter types them
        (BackendAdapter.typed_arguments)."""
        made_for = document["for"]
        return cls(document["arguments"], made_for["library_version"], made_for["config_digest"],
                   tuple(document["patches"]))


def translate(adapter: BackendAdapter, run_dir: Path, *, quiet: bool = False) -> Translation:
    """convert_config, then the enabled build_args patches (PatchError when one fails). quiet: the patches' own
    `patch applied` lines are left out (the worker that runs the job logs them)."""
    version = adapter.detect_backend_version()
    ctx = PatchContext(backend=adapter.name, phase="build_args", backend_version=version, cfg=adapter.cfg,
                       run_dir=Path(run_dir), backend_args=adapter.convert_config())
    with _patch_lines_left_out() if quiet else contextlib.nullcontext():
        applied = run_patches(ctx, resolve_enabled_ids(str(adapter.cfg.patches.enabled)))
    return Translation(ctx.backend_args, version, config_digest(adapter.cfg), tuple(applied))


def why_translate_again(translation: Optional[Translation], adapter: BackendAdapter, installed: Optional[str],
                        resolved_here: frozenset = frozenset()) -> Optional[str]:
    """None when the prepared translation fits this process (`installed`: its library's version, and its config);
    else why not, one line. resolved_here: the `auto` knobs this process's own plan resolved (a Slurm node's)."""
    if translation is None:
        return "the job was prepared without them"
    if installed != translation.library_version:
        library = adapter.distribution or adapter.name
        return (f"{library} {installed or 'is not installed'} here, the job was prepared with "
                f"{translation.library_version or 'none installed'}")
    if config_digest(adapter.cfg) != translation.config_digest:
        cause = (f"this node's plan resolved {', '.join(sorted(resolved_here))}=auto" if resolved_here
                 else "a requeue's resume, or an edited job config")
        return f"the job's config changed after it was prepared ({cause})"
    return None


# where this process meets its job's other nodes: set on each node of a multi-node job, read by no backend's
# translation, so a node with its own rank and rendezvous still runs the arguments the job was prepared with
RENDEZVOUS_KEYS = ("node_rank", "master_addr", "master_port", "rdzv_backend")


def config_digest(cfg: Any) -> str:
    """What the translation depends on: the config as it resolves here (but its rendezvous, RENDEZVOUS_KEYS), and
    the patch selection (PRIMUS_PATCHES)."""
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for key in RENDEZVOUS_KEYS:
        plain.get("launch", {}).pop(key, None)
    text = json.dumps([plain, os.environ.get("PRIMUS_PATCHES")], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _patch_lines_left_out() -> Iterator[None]:
    runner_log = logging.getLogger(run_patches.__module__)
    level = runner_log.level
    runner_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        runner_log.setLevel(level)
