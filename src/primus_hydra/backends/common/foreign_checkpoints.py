"""Weights of another backend's checkpoint, for `module.checkpoint.load` with backend=torch.

A step of a backend whose adapter declares a weight converter (BackendTraits.weight_converter: megatron,
torchtitan; its meta.json names the backend) is converted once, by rank 0, into a native weights folder under
`<run_dir>/.primus/converted/`; every rank then loads and reshards it as any native checkpoint, and the folder is
removed again. Only rank 0 ever holds the whole model, on the CPU, while converting.
"""
from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch.distributed as dist

from primus_hydra.backends.base import adapter_class_named
from primus_hydra.backends.common.checkpoint import CheckpointManager
from primus_hydra.backends.common.checkpoint_paths import read_meta
from primus_hydra.backends.common.distributed import broadcast_from_rank_0
from primus_hydra.backends.torch.model import build_model_on_meta
from primus_hydra.config.targets import load_target
from primus_hydra.errors import CheckpointError


@contextlib.contextmanager
def weights_in_native_format(step_dir: Path, run_dir: Path, model_cfg: Any, backend: Optional[str] = None) -> Iterator[Path]:
    """Collective: `step_dir` itself when it is a native checkpoint, else its converted copy while the block runs.
    `backend`: the backend whose converter reads it, for a folder without the project's meta.json (a Megatron-format
    iteration folder: megatron)."""
    converter = weight_converter(backend or read_meta(step_dir)[0].get("backend"))
    if converter is None:
        yield step_dir
        return
    write_native_copy = load_target(converter, "weight_converter")

    out = run_dir / ".primus" / "converted" / step_dir.name
    main = not dist.is_initialized() or dist.get_rank() == 0
    failure: Optional[str] = None
    if main:
        shutil.rmtree(out, ignore_errors=True)
        try:
            write_native_copy(step_dir, out, model_cfg)
        except CheckpointError as error:
            failure = str(error)
    failure = broadcast_from_rank_0(failure)
    if failure:
        raise CheckpointError(f"module.checkpoint.load: {failure}")
    try:
        yield out
    finally:
        if dist.is_initialized():
            dist.barrier()
        if main:
            shutil.rmtree(out, ignore_errors=True)
            with contextlib.suppress(OSError):
                out.parent.rmdir()  # only when no other conversion is there


def weight_converter(backend: Any) -> Optional[str]:
    """The converter the adapter of the backend that wrote a step declares (BackendTraits.weight_converter); None
    for a native step, one no backend converts, or a backend this version does not have."""
    adapter = adapter_class_named(backend) if isinstance(backend, str) else None
    return adapter.traits.weight_converter if adapter is not None else None


def model_object(model_cfg: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_object(model_cfg) if OmegaConf.is_config(model_cfg) else model_cfg



def native_checkpoint_weights(path: Path, model: Any) -> dict:
    """Collective: a native (backend=torch) checkpoint's weights, whole, on this process's CPU, for another backend
    that starts from one (`module.checkpoint.load`). `model` is the model config as an object (model_object)."""
    native = build_model_on_meta(model)
    native.to_empty(device="cpu")
    CheckpointManager.load(path, "module.checkpoint.load", native, None, model.name)
    return native.state_dict()

def save_native_weights(native: dict, out: Path, model: Any, source: Path) -> Path:
    """Another backend's weights, already under native names, as a backend=torch weights folder (DCP, `model.<name>`
    keys, as the native trainer loads and reshards): each of the model's parameters present, with its shape."""
    import torch.distributed.checkpoint as dcp

    expected = build_model_on_meta(model).state_dict()
    missing = sorted(set(expected) - set(native))
    if missing:
        raise CheckpointError(f"{source}: has no weights for {len(missing)} parameter(s) of model={model.name} "
                              f"({', '.join(missing[:3])}...)")
    for name, tensor in expected.items():
        if tuple(native[name].shape) != tuple(tensor.shape):
            raise CheckpointError(f"{source}: {name} is {tuple(native[name].shape)} in the checkpoint, "
                                  f"{tuple(tensor.shape)} in model={model.name}")
    dcp.save({"model": {name: native[name].contiguous() for name in expected}}, checkpoint_id=str(out), no_dist=True)
    return out


def read_checkpoint_tensors(path: Path, wanted: Callable[[str], bool], kind: str) -> dict:
    """The tensors of a torch.distributed.checkpoint folder whose keys `wanted` accepts, read whole on this process
    (no process group); CheckpointError (one line) for a folder that is no such checkpoint."""
    import torch
    import torch.distributed.checkpoint as dcp

    reader = dcp.FileSystemReader(str(path))
    try:
        metadata = reader.read_metadata().state_dict_metadata
    except Exception as error:  # noqa: BLE001 - a folder that is no DCP checkpoint
        raise CheckpointError(f"{path}: not a {kind} checkpoint ({type(error).__name__}: {error})") from error
    tensors = {key: torch.empty(tuple(meta.size), dtype=meta.properties.dtype) for key, meta in metadata.items()
               if wanted(key) and hasattr(meta, "size")}
    dcp.load(tensors, storage_reader=reader, no_dist=True)
    return tensors

