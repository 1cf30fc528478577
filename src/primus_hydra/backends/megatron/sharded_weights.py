"""Full (unsharded) megatron-core weights into this rank's GPTModel: its pipeline stage's layers, its experts, its
tensor-parallel slice of each parameter (the `partition_dim` megatron-core records on it; SwiGLU's fc1 holds a
slice of the gate and one of the up projection). Used to start backend=megatron from a native checkpoint, or from
a Hugging Face folder (`HfMegatronWeights`: each megatron-core tensor made when a rank asks for it, from the HF
tensors that feed it, so a rank reads only its own stage's layers and its own experts)."""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

from primus_hydra.backends.common.foreign_checkpoints import model_object, native_checkpoint_weights
from primus_hydra.backends.common.hf_names import native_shape
from primus_hydra.backends.megatron.convert import Move, native_to_megatron, pad_vocabulary, weight_table
from primus_hydra.errors import CheckpointError

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")
_SKIPPED = ("_extra_state", "local_tokens_per_expert")  # TE metadata, routing statistics: not weights


def native_weights_for(path: Path, model_cfg: Any, megatron_model: Any) -> dict[str, torch.Tensor]:
    """A native (backend=torch) checkpoint's weights under megatron-core names, vocabulary padded as the model's."""
    model = model_object(model_cfg)
    return pad_vocabulary(native_to_megatron(native_checkpoint_weights(path, model), model), megatron_model.vocab_size)


class HfMegatronWeights(Mapping):
    """The whole model under megatron-core names, read from an HF folder only as `load_full_weights` asks for each
    tensor: the native tensors a weight_table move needs, read from the memory-mapped safetensors files (one
    expert's rows of the stacked experts for a routed expert's weight), then the move's own conversion. A rank
    reads its pipeline stage's layers and its expert-parallel experts; each weight whole, before its tensor-parallel
    slice (`_tp_slice`), so a rank holds at most one whole weight (the embedding) beyond its own shards."""

    def __init__(self, folder: Path, model: Any, padded_vocab: int):
        from primus_hydra.backends.common.hf_checkpoint import HfReader, _table

        self.model, self.padded_vocab = model, padded_vocab
        self.reader, self.native = HfReader(folder), _table(folder, model)
        self.moves = {name: move for move in weight_table(model) for name in move.megatron
                      if not move.optional or move.native[0] in self.native}
        self._last: tuple[Optional[Move], tuple] = (None, ())  # a move's outputs: qkv's three natives read once

    def __enter__(self) -> "HfMegatronWeights":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.reader.close()

    def __getitem__(self, name: str) -> torch.Tensor:
        if name == "output_layer.weight" and self.model.tie_embeddings:  # a tied model's last stage keeps a copy
            name = "embedding.word_embeddings.weight"
        move = self.moves[name]
        if _EXPERT.search(name):  # one expert: its rows of the native stacks; fc1 = [gate; up], fc2 = down
            expert = move.megatron.index(name)
            return torch.cat([self._native(native, expert) for native in move.native])
        if self._last[0] is not move:
            self._last = (move, tuple(move.to_megatron([self._native(native) for native in move.native])))
        tensor = self._last[1][move.megatron.index(name)]
        return pad_vocabulary({name: tensor}, self.padded_vocab)[name]

    def _native(self, name: str, expert: Optional[int] = None) -> torch.Tensor:
        """Native parameter `name` whole, or the one expert's [f, h] / [h, f] of a stacked one."""
        from primus_hydra.backends.common.hf_checkpoint import SAFETENSORS_DTYPES, fill_native_block

        entries = self.native[name]
        dtype = SAFETENSORS_DTYPES[self.reader.tensors[entries[0].hf_name].dtype]
        shape = native_shape(entries)
        if expert is not None:
            shape = (1, *shape[1:])
        out = torch.empty(shape, dtype=dtype)
        fill_native_block(self.reader, entries, (expert or 0,) + (0,) * (len(shape) - 1), out)
        return out if expert is None else out[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self.moves)

    def __len__(self) -> int:
        return len(self.moves)


def global_name(name: str, layer_numbers: dict[int, int], first_expert: int) -> str:
    match = _LAYER.match(name)
    if match:
        name = f"decoder.layers.{layer_numbers[int(match.group(1))]}." + name[match.end():]
    expert = _EXPERT.search(name)
    if expert:
        name = name[: expert.start()] + f".local_experts.{first_expert + int(expert.group(1))}." + name[expert.end():]
    return name


def _tp_slice(full: torch.Tensor, param: torch.Tensor, name: str, rank: int, size: int, glu: bool) -> torch.Tensor:
    if size == 1 or not getattr(param, "tensor_model_parallel", False):
        return full
    dim = param.partition_dim
    if glu and name.endswith("linear_fc1.weight"):  # [gate; up]: each rank holds [gate_r; up_r]
        gate, up = full.chunk(2, dim=0)
        return torch.cat([gate.chunk(size, dim=0)[rank], up.chunk(size, dim=0)[rank]], dim=0)
    return full.chunk(size, dim=dim)[rank]


@torch.no_grad()
def load_full_weights(model: Any, full: dict[str, torch.Tensor]) -> None:
    """Copy this rank's share of `full` (megatron-core names, whole model) into `model` (collective-free)."""
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
        source = full.get(global_name(name, layer_numbers, first_expert))
        if source is None:
            missing.append(name)
            continue
        if ".experts." in name:
            rank, size = ps.get_expert_tensor_parallel_rank(), ps.get_expert_tensor_parallel_world_size()
        else:
            rank, size = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
        shard = _tp_slice(source, tensor, name, rank, size, glu)
        if shard.shape != tensor.shape:
            raise CheckpointError(f"weight {name}: the checkpoint gives {tuple(shard.shape)} for this rank, the model "
                                  f"holds {tuple(tensor.shape)}")
        tensor.copy_(shard.to(tensor.dtype))
    if missing:
        raise CheckpointError(f"the checkpoint has no weights for {len(missing)} parameter(s) of the model "
                              f"({', '.join(missing[:3])}...)")
