"""Atomic, sharded checkpoints with torch.distributed.checkpoint (DCP).

Every rank writes its shards of the model and optimizer into `.tmp-step_NNNNNNN`; after a barrier rank 0 adds
trainer_state.pt and meta.json (file sizes, to detect truncation), renames the folder to `step_NNNNNNN`, then
replaces `latest`. A crash at any moment leaves the previous `latest` in place, never a half-written checkpoint
behind it. Loading goes through the current layout's state dict, so a checkpoint written at dp=2, fsdp=2 or
tp=2 resumes at any other layout (DCP reshards). Existing checkpoints are never overwritten.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from primus_hydra.backends.torch.checkpoint_paths import LATEST, META, TRAINER_STATE, CheckpointFolder, step_dir_name
from primus_hydra.errors import CheckpointError


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


class CheckpointManager(CheckpointFolder):
    """Saves and loads the checkpoints of a folder (collectives: every rank calls save and load)."""

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, trainer_state: dict,
             meta: dict[str, Any], before_finalize=None) -> Path:
        """Collective: every rank calls it. `before_finalize` is a hook for fault-injection tests."""
        final = self.root / step_dir_name(step)
        if final.exists():
            raise CheckpointError(f"checkpoint {final} already exists; refusing to overwrite it")
        tmp = self.root / f".tmp-{final.name}"
        if _is_main():
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob(".tmp-step_*"):  # left by crashed saves: never behind `latest`
                shutil.rmtree(stale)
            tmp.mkdir()
        _barrier()
        dcp, get_state_dict, _ = _dcp()
        model_state, optimizer_state = get_state_dict(model, optimizer)
        with _single_process_quiet():
            dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(tmp), no_dist=not dist.is_initialized())
        if before_finalize is not None:
            before_finalize()
        _barrier()
        if _is_main():
            torch.save(trainer_state, tmp / TRAINER_STATE)
            sizes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
            (tmp / META).write_text(json.dumps({**meta, "step": step, "files": sizes}, indent=2))
            _fsync_dir(tmp)
            os.rename(tmp, final)
            pointer_tmp = self.root / f".{LATEST}.tmp"
            pointer_tmp.write_text(final.name + "\n")
            os.replace(pointer_tmp, self.root / LATEST)
            _fsync_dir(self.root)
        _barrier()  # nobody moves on (or exits) before the checkpoint is complete
        return final

    @staticmethod
    def load(path: Path, key: str, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer], model_name: str) -> dict:
        """Load into the current layout (collective). optimizer=None loads the weights only. Returns trainer state."""
        CheckpointManager.verify(path, key)
        dcp, get_state_dict, set_state_dict = _dcp()
        from torch.distributed.checkpoint.api import CheckpointException

        if optimizer is None:
            model_state = get_state_dict(model, [])[0]
            state = {"model": model_state}
        else:
            model_state, optimizer_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optimizer": optimizer_state}
        try:
            with _single_process_quiet():
                dcp.load(state, checkpoint_id=str(path), no_dist=not dist.is_initialized())
        except (Exception, CheckpointException) as error:  # DCP's CheckpointException is a BaseException
            lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
            cause = lines[-1] if lines else type(error).__name__  # DCP wraps each rank's traceback: the last line says why
            if "Missing key" in cause or "size mismatch" in cause.lower() or "shape" in cause.lower():
                raise CheckpointError(f"checkpoint {path} does not fit model {model_name}: {cause}") from error
            raise CheckpointError(f"{key}: {path} cannot be loaded ({cause})") from error
        if optimizer is None:
            set_state_dict(model, [], model_state_dict=state["model"], optim_state_dict={})
            return {}
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        try:
            return torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=False)
        except Exception as error:  # noqa: BLE001
            raise CheckpointError(f"{key}: {path / TRAINER_STATE} cannot be loaded ({type(error).__name__}: {error})") from error


def _dcp():
    """torch.distributed.checkpoint takes ~0.4 s to import: only when a checkpoint is written or read."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    return dcp, get_state_dict, set_state_dict


@contextlib.contextmanager
def _single_process_quiet():
    """DCP warns that it assumes a single process when no process group exists: that is exactly our intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


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
