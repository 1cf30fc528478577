"""Full (unsharded) megatron-core weights into this rank's GPTModel: its pipeline stage's layers, its experts, its
tensor-parallel slice of each parameter (the `partition_dim` megatron-core records on it; SwiGLU's fc1 holds a
slice of the gate and one of the up projection). Used to start backend=megatron from a native checkpoint, or from
a Hugging Face folder (hf_weights.py: a source that reads each rank's share itself)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from primus_hydra.backends.common.foreign_checkpoints import model_object, native_checkpoint_weights
from primus_hydra.backends.megatron.convert import native_to_megatron, pad_vocabulary
from primus_hydra.errors import CheckpointError

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
EXPERT_NAME = re.compile(r"\.local_experts\.(\d+)\.")
_SKIPPED = ("_extra_state", "local_tokens_per_expert")  # TE metadata, routing statistics: not weights


def native_weights_for(path: Path, model_cfg: Any, megatron_model: Any) -> dict[str, torch.Tensor]:
    """A native (backend=torch) checkpoint's weights under megatron-core names, vocabulary padded as the model's."""
    model = model_object(model_cfg)
    return pad_vocabulary(native_to_megatron(native_checkpoint_weights(path, model), model), megatron_model.vocab_size)


def global_name(name: str, layer_numbers: dict[int, int], first_expert: int) -> str:
    match = _LAYER.match(name)
    if match:
        name = f"decoder.layers.{layer_numbers[int(match.group(1))]}." + name[match.end():]
    expert = EXPERT_NAME.search(name)
    if expert:
        name = name[: expert.start()] + f".local_experts.{first_expert + int(expert.group(1))}." + name[expert.end():]
    return name


def tensor_parallel_slice(full: torch.Tensor, param: torch.Tensor, name: str, rank: int, size: int, glu: bool) -> torch.Tensor:
    if size == 1 or not getattr(param, "tensor_model_parallel", False):
        return full
    dim = param.partition_dim
    if glu and name.endswith("linear_fc1.weight"):  # [gate; up]: each rank holds [gate_r; up_r]
        gate, up = full.chunk(2, dim=0)
        return torch.cat([gate.chunk(size, dim=0)[rank], up.chunk(size, dim=0)[rank]], dim=0)
    return full.chunk(size, dim=dim)[rank]


@torch.no_grad()
def load_full_weights(model: Any, full: Any) -> None:
    """Copy this rank's share of `full` (megatron-core names, whole model: a dict, or a source with `rank_share`)
    into `model` (collective-free)."""
    from megatron.core import parallel_state as ps

    layer_numbers = {local: layer.layer_number - 1 for local, layer in enumerate(model.decoder.layers)} if hasattr(
        model, "decoder") else {}
    experts = next((m for m in model.modules() if hasattr(m, "local_experts")), None)
    first_expert = ps.get_expert_model_parallel_rank() * len(experts.local_experts) if experts is not None else 0
    glu = bool(model.config.gated_linear_unit)
    missing = []
    for name, tensor in model.state_dict(keep_vars=True).items():
        if name.endswith(_SKIPPED) or tensor is None:
            continue
        key = global_name(name, layer_numbers, first_expert)
        if key not in full:
            missing.append(name)
            continue
        if ".experts." in name:
            rank, size = ps.get_expert_tensor_parallel_rank(), ps.get_expert_tensor_parallel_world_size()
        else:
            rank, size = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
        if hasattr(full, "rank_share"):  # a source that reads only this rank's share (hf_weights.py)
            shard = full.rank_share(key, tensor, name, rank, size, glu)
        else:
            shard = tensor_parallel_slice(full[key], tensor, name, rank, size, glu)
        if shard.shape != tensor.shape:
            raise CheckpointError(f"weight {name}: the checkpoint gives {tuple(shard.shape)} for this rank, the model "
                                  f"holds {tuple(tensor.shape)}")
        tensor.copy_(shard.to(tensor.dtype))
    if missing:
        raise CheckpointError(f"the checkpoint has no weights for {len(missing)} parameter(s) of the model "
                              f"({', '.join(missing[:3])}...)")
