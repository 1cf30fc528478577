"""The weights of a backend=megatron checkpoint read with torch alone (no megatron import).

megatron-core's torch_dist format is a torch.distributed.checkpoint folder whose model keys are layout-free: the
decoder layers stacked along a leading dimension (`decoder.layers.self_attention.linear_qkv.weight` is
[num_layers, ...]), the experts of a layer along the next one (`...experts.experts.linear_fc1.weight`), the
norms under Transformer Engine's names (`linear_qkv.layer_norm_weight` is the input norm), SwiGLU's fc1 whole as
[gate; up]. `read_megatron_weights` unstacks them into per-layer names of megatron-core's local layer spec, the
names convert.py speaks.
"""
from __future__ import annotations

from pathlib import Path

import torch

from primus_hydra.backends.common.foreign_checkpoints import model_object, read_checkpoint_tensors, save_native_weights
from primus_hydra.backends.megatron.convert import megatron_to_native
from primus_hydra.errors import CheckpointError

_STACKED = "decoder.layers."
_NORM_NAMES = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
               "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight"}
_GROUPED_EXPERTS = "mlp.experts.experts."


def read_megatron_weights(path: Path, num_layers: int) -> dict[str, torch.Tensor]:
    """Full model weights of checkpoint folder `path` under per-layer megatron-core names."""
    wanted = read_checkpoint_tensors(path, lambda key: not key.startswith("optimizer") and "_extra_state" not in key,
                                     "megatron-core")
    weights: dict[str, torch.Tensor] = {}
    for key, tensor in wanted.items():
        if not key.startswith(_STACKED):
            weights[key] = tensor
            continue
        rest = key[len(_STACKED):]
        if tensor.shape[0] != num_layers:
            raise CheckpointError(f"{path}: {key} holds {tensor.shape[0]} layers, the model has {num_layers} (a model "
                                  f"with dense and MoE layers mixed is not converted)")
        for layer in range(num_layers):
            weights.update(_layer_weights(f"{_STACKED}{layer}.", rest, tensor[layer]))
    return weights


def _layer_weights(prefix: str, rest: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    if rest in _NORM_NAMES:
        return {prefix + _NORM_NAMES[rest]: tensor}
    if rest.startswith(_GROUPED_EXPERTS):  # [experts, ...] -> local_experts.<e>
        leaf = rest[len(_GROUPED_EXPERTS):]
        return {f"{prefix}mlp.experts.local_experts.{e}.{leaf}": tensor[e] for e in range(tensor.shape[0])}
    return {prefix + rest: tensor}


def write_native_copy(megatron_step: Path, out: Path, model_cfg) -> Path:
    """A backend=torch weights folder made from a backend=megatron checkpoint step; one process writes it."""
    model = model_object(model_cfg)
    native = megatron_to_native(read_megatron_weights(megatron_step, model.num_layers), model)
    return save_native_weights(native, out, model, megatron_step)
