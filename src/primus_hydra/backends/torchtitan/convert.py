"""Weights between backend=torch and torchtitan's llama3 / qwen3 / deepseek_v3 (`module.checkpoint.load` both ways).

The names are the same but for MoE layers, and the rotary rows of llama3 and deepseek_v3 are in pairwise order
(native_init.py has both maps). A torchtitan checkpoint is a torch.distributed.checkpoint folder whose model keys are
those names: read with torch alone (no torchtitan import), like a megatron one (common/foreign_checkpoints.py).
A Hugging Face folder's tensors are native ones under HF's names (common/hf_names.py): each rank reads the block of
each weight it holds (`load_hf_weights`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from primus_hydra.backends.common.foreign_checkpoints import (
    model_object,
    native_checkpoint_weights,
    read_checkpoint_tensors,
    save_native_weights,
)
from primus_hydra.backends.common.weights import shard_bounds
from primus_hydra.backends.torchtitan.native_init import (
    RotaryRows,
    deinterleave_rotary_rows,
    interleave_rotary_rows,
    native_name,
    rotary_rows,
    torchtitan_name,
)
from primus_hydra.errors import CheckpointError

_NOT_MODEL = ("optimizer", "lr_scheduler", "dataloader", "train_state")


def native_to_torchtitan(weights: dict[str, torch.Tensor], model_cfg: Any) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in weights.items():
        rotary = rotary_rows(name, model_cfg)
        out[torchtitan_name(name)] = interleave_rotary_rows(tensor, rotary) if rotary else tensor
    return out


def torchtitan_to_native(weights: dict[str, torch.Tensor], model_cfg: Any) -> dict[str, torch.Tensor]:
    out = {}
    for titan, tensor in weights.items():
        name = native_name(titan)
        rotary = rotary_rows(name, model_cfg)
        out[name] = deinterleave_rotary_rows(tensor, rotary) if rotary else tensor
    return out


def read_torchtitan_weights(path: Path) -> dict[str, torch.Tensor]:
    """The model weights of a backend=torchtitan checkpoint step (every state but the model's left out)."""
    return read_checkpoint_tensors(path, lambda key: not key.startswith(_NOT_MODEL), "torchtitan")


def write_native_copy(torchtitan_step: Path, out: Path, model_cfg: Any) -> Path:
    """A backend=torch weights folder made from a backend=torchtitan checkpoint step; one process writes it."""
    model = model_object(model_cfg)
    return save_native_weights(torchtitan_to_native(read_torchtitan_weights(torchtitan_step), model), out, model,
                               torchtitan_step)


@torch.no_grad()
def load_native_weights(model_parts: list, native_step: Path, model_cfg: Any) -> None:
    """Collective: a backend=torch checkpoint's weights into torchtitan's (sharded) model; each rank reads the whole
    model on the CPU, then keeps its FSDP/TP shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model = model_object(model_cfg)
    weights = native_to_torchtitan(native_checkpoint_weights(native_step, model), model)
    for part in model_parts:
        set_model_state_dict(part, weights, options=StateDictOptions(full_state_dict=True, strict=True))


@torch.no_grad()
def load_hf_weights(model_parts: list, folder: Path, model_cfg: Any) -> None:
    """A Hugging Face folder's weights into torchtitan's (sharded) model, collective-free: each rank reads, from the
    safetensors files, only the block of each weight its FSDP/TP shard holds (the whole heads around it for rows
    torchtitan orders pairwise)."""
    from primus_hydra.backends.common.hf_checkpoint import HfReader, hf_entries_by_native_name

    model = model_object(model_cfg)
    table = hf_entries_by_native_name(folder, model)
    with HfReader(folder) as reader:
        for part in model_parts:
            for name, tensor in part.state_dict(keep_vars=True).items():
                native = native_name(name)
                if native not in table:
                    raise CheckpointError(f"module.checkpoint.load={folder}: no Hugging Face tensor fills torchtitan's "
                                          f"{name} (model={model.name})")
                local, _, offset = shard_bounds(tensor)
                if local.numel():
                    _fill_from_hf(reader, table[native], offset, local, rotary_rows(native, model))


def _fill_from_hf(reader: Any, entries: list, offset: tuple, local: torch.Tensor, rotary: Optional[RotaryRows]) -> None:
    from primus_hydra.backends.common.hf_checkpoint import fill_native_block

    if rotary is None:
        fill_native_block(reader, entries, offset, local)
        return
    first = offset[0] // rotary.unit * rotary.unit  # the whole units (heads) the block's rows fall in
    last = -(-(offset[0] + local.shape[0]) // rotary.unit) * rotary.unit
    units = local.new_empty(last - first, *local.shape[1:])
    fill_native_block(reader, entries, (first, *offset[1:]), units)
    local.copy_(interleave_rotary_rows(units, rotary)[offset[0] - first: offset[0] - first + local.shape[0]])
