"""Weights between backend=torch and torchtitan's llama3 / qwen3 (`module.checkpoint.load` both ways).

The names are the same (tok_embeddings, layers.<i>.attention.wq, feed_forward.w1, ..., norm, output); only llama3's
query and key rows differ in order within each head (native_init.py: it rotates pairs (2i, 2i+1), the native model
and qwen3 (i, i + d/2)). A torchtitan checkpoint is a torch.distributed.checkpoint folder whose model keys are
those names: read with torch alone (no torchtitan import), like a megatron one (torch/foreign_checkpoints.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from primus_hydra.backends.torchtitan.native_init import (
    deinterleave_rotary_rows,
    interleave_rotary_rows,
    pairwise_rotary,
)

_ROTARY = ("attention.wq.weight", "attention.wk.weight")
_NOT_MODEL = ("optimizer", "lr_scheduler", "dataloader", "train_state")


def _head_dim(model_cfg: Any) -> int:
    return model_cfg.head_dim or model_cfg.hidden_size // model_cfg.num_attention_heads


def _reorder(weights: dict[str, torch.Tensor], model_cfg: Any, reorder: Callable) -> dict[str, torch.Tensor]:
    if not pairwise_rotary(model_cfg):  # qwen3: the native order
        return weights
    d = _head_dim(model_cfg)
    return {name: reorder(tensor, d) if name.endswith(_ROTARY) else tensor for name, tensor in weights.items()}


def native_to_torchtitan(weights: dict[str, torch.Tensor], model_cfg: Any) -> dict[str, torch.Tensor]:
    return _reorder(weights, model_cfg, interleave_rotary_rows)


def torchtitan_to_native(weights: dict[str, torch.Tensor], model_cfg: Any) -> dict[str, torch.Tensor]:
    return _reorder(weights, model_cfg, deinterleave_rotary_rows)


def read_torchtitan_weights(path: Path) -> dict[str, torch.Tensor]:
    """The model weights of a backend=torchtitan checkpoint step (every state but the model's left out)."""
    from primus_hydra.backends.torch.foreign_checkpoints import read_checkpoint_tensors

    return read_checkpoint_tensors(path, lambda key: not key.startswith(_NOT_MODEL), "torchtitan")


def write_native_copy(torchtitan_step: Path, out: Path, model_cfg: Any) -> Path:
    """A backend=torch weights folder made from a backend=torchtitan checkpoint step; one process writes it."""
    from primus_hydra.backends.torch.foreign_checkpoints import model_object, save_native_weights

    model = model_object(model_cfg)
    return save_native_weights(torchtitan_to_native(read_torchtitan_weights(torchtitan_step), model), out, model,
                               torchtitan_step)


@torch.no_grad()
def load_native_weights(model_parts: list, native_step: Path, model_cfg: Any) -> None:
    """Collective: a backend=torch checkpoint's weights into torchtitan's (sharded) model; each rank reads the whole
    model on the CPU, then keeps its FSDP/TP shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from primus_hydra.backends.torch.checkpoint import CheckpointManager
    from primus_hydra.backends.torch.foreign_checkpoints import model_object
    from primus_hydra.backends.torch.model import build_model_on_meta

    model = model_object(model_cfg)
    native = build_model_on_meta(model)
    native.to_empty(device="cpu")
    CheckpointManager.load(native_step, "module.checkpoint.load", native, None, model.name)
    weights = native_to_torchtitan(native.state_dict(), model)
    for part in model_parts:
        set_model_state_dict(part, weights, options=StateDictOptions(full_state_dict=True, strict=True))
