"""Weights between the native model (backend=torch) and megatron-core's GPTModel, both ways, as full (unsharded)
state dicts. Pure tensor shuffling: no megatron import.

One table (`weight_table`) lists, for a model, which native weights become which Megatron weights and how; each
direction reads it, so the two cannot drift apart. Megatron stores attention as one `linear_qkv` whose rows go query
group by query group ([the group's query heads, its key head, its value head]), and SwiGLU as one `linear_fc1` =
[gate (w1); up (w3)]. Routed experts are SequentialMLP's `local_experts.<e>`; the native model stacks them in
(experts, ...) tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from primus_hydra.config.model_math import is_moe_layer

Tensors = Sequence[torch.Tensor]


@dataclass(frozen=True)
class Move:
    """Native weights that become Megatron weights: `to_megatron` and `to_native` are each other's inverse."""

    native: tuple[str, ...]
    megatron: tuple[str, ...]
    to_megatron: Callable[[Tensors], Tensors] = tuple
    to_native: Callable[[Tensors], Tensors] = tuple
    optional: bool = False  # moved only where the source state has it (a router's expert bias, shared experts)


def _renamed(native: str, megatron: str, optional: bool = False) -> Move:
    return Move((native,), (megatron,), optional=optional)


def _vocabulary_rows(native: str, megatron: str, vocab: int) -> Move:
    """One row per token; read back, Megatron's padding rows (pad_vocabulary) are dropped."""
    return Move((native,), (megatron,), to_native=lambda t: (t[0][:vocab],))


def _swiglu(native_gate: str, native_up: str, megatron: str, optional: bool = False) -> Move:
    return Move((native_gate, native_up), (megatron,), lambda t: (torch.cat(list(t)),), lambda t: t[0].chunk(2),
                optional=optional)


def _qkv(wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, groups: int) -> torch.Tensor:
    hidden = wq.shape[-1] if wq.dim() > 1 else None
    q = wq.reshape(groups, -1, *wq.shape[1:])
    k = wk.reshape(groups, -1, *wk.shape[1:])
    v = wv.reshape(groups, -1, *wv.shape[1:])
    fused = torch.cat([q, k, v], dim=1)
    return fused.reshape(-1, hidden) if hidden is not None else fused.reshape(-1)


def _split_qkv(qkv: torch.Tensor, groups: int, head_dim: int, heads: int) -> tuple[torch.Tensor, ...]:
    per_group = heads // groups
    grouped = qkv.reshape(groups, (per_group + 2) * head_dim, *qkv.shape[1:])
    q, k, v = grouped.split([per_group * head_dim, head_dim, head_dim], dim=1)
    return tuple(t.reshape(-1, *qkv.shape[1:]) for t in (q, k, v))


def _fused_qkv(native_prefix: str, megatron: str, suffix: str, model: Any) -> Move:
    groups, heads = model.num_kv_heads, model.num_attention_heads
    head_dim = model.head_dim or model.hidden_size // heads
    return Move(tuple(f"{native_prefix}{name}.{suffix}" for name in ("wq", "wk", "wv")), (megatron,),
                lambda t: (_qkv(*t, groups),), lambda t: _split_qkv(t[0], groups, head_dim, heads))


def _routed_experts(ffn: str, mlp: str, experts: int) -> list[Move]:
    """The native (experts, ...) stacks of w1 / w3 / w2 as each local expert's fused linear_fc1 and linear_fc2."""
    local = [f"{mlp}experts.local_experts.{e}." for e in range(experts)]

    def fc1_to_native(fused: Tensors) -> Tensors:
        gates_ups = [t.chunk(2) for t in fused]
        return torch.stack([gate for gate, _ in gates_ups]), torch.stack([up for _, up in gates_ups])

    return [Move((ffn + "w1", ffn + "w3"), tuple(name + "linear_fc1.weight" for name in local),
                 lambda t: tuple(torch.cat([t[0][e], t[1][e]]) for e in range(experts)), fc1_to_native),
            Move((ffn + "w2",), tuple(name + "linear_fc2.weight" for name in local),
                 lambda t: tuple(t[0][e] for e in range(experts)), lambda t: (torch.stack(list(t)),))]


def _layer_moves(model: Any, i: int) -> list[Move]:
    src, dst = f"layers.{i}.", f"decoder.layers.{i}."
    attn, ffn, mlp = src + "attention.", src + "feed_forward.", dst + "mlp."
    moves = [_renamed(src + "attention_norm.weight", dst + "input_layernorm.weight"),
             _fused_qkv(attn, dst + "self_attention.linear_qkv.weight", "weight", model)]
    if model.qkv_bias:
        moves.append(_fused_qkv(attn, dst + "self_attention.linear_qkv.bias", "bias", model))
    if model.qk_norm:
        moves += [_renamed(attn + "q_norm.weight", dst + "self_attention.q_layernorm.weight"),
                  _renamed(attn + "k_norm.weight", dst + "self_attention.k_layernorm.weight")]
    moves += [_renamed(attn + "wo.weight", dst + "self_attention.linear_proj.weight"),
              _renamed(src + "ffn_norm.weight", dst + "pre_mlp_layernorm.weight")]
    if not is_moe_layer(model, i):
        return moves + [_swiglu(ffn + "w1.weight", ffn + "w3.weight", mlp + "linear_fc1.weight"),
                        _renamed(ffn + "w2.weight", mlp + "linear_fc2.weight")]
    return moves + [_renamed(ffn + "router.weight", mlp + "router.weight"),
                    _renamed(ffn + "expert_bias", mlp + "router.expert_bias", optional=True),
                    *_routed_experts(ffn, mlp, model.moe.num_experts),
                    _swiglu(ffn + "shared.w1.weight", ffn + "shared.w3.weight",
                            mlp + "shared_experts.linear_fc1.weight", optional=True),
                    _renamed(ffn + "shared.w2.weight", mlp + "shared_experts.linear_fc2.weight", optional=True)]


def weight_table(model: Any) -> list[Move]:
    """Every weight of the model, from its native name to its megatron-core GPTModel name."""
    if model.mla.enabled:
        raise ValueError(f"model={model.name}: converting multi-latent attention weights is not supported yet")
    moves = [_vocabulary_rows("tok_embeddings.weight", "embedding.word_embeddings.weight", model.vocab_size),
             _renamed("norm.weight", "decoder.final_layernorm.weight")]
    if not model.tie_embeddings:
        moves.append(_vocabulary_rows("output.weight", "output_layer.weight", model.vocab_size))
    for i in range(model.num_layers):
        moves += _layer_moves(model, i)
    return moves


def native_to_megatron(state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
    """The native model's state dict (names of backends/torch/model.py) under megatron-core's GPTModel names."""
    out: dict[str, torch.Tensor] = {}
    for move in weight_table(model):
        if move.optional and move.native[0] not in state:
            continue
        out.update(zip(move.megatron, move.to_megatron([state[name] for name in move.native])))
    return out


def megatron_to_native(state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
    """megatron-core GPTModel weights (full; a padded vocabulary is cut to the model's) under the native model's names."""
    out: dict[str, torch.Tensor] = {}
    for move in weight_table(model):
        if move.optional and move.megatron[0] not in state:
            continue
        out.update(zip(move.native, move.to_native([state[name] for name in move.megatron])))
    return out


def pad_vocabulary(state: dict[str, torch.Tensor], padded: int) -> dict[str, torch.Tensor]:
    """Zero rows for Megatron's padded vocabulary entries (embedding and output layer)."""
    out = dict(state)
    for key in ("embedding.word_embeddings.weight", "output_layer.weight"):
        if key in out and out[key].shape[0] < padded:
            tensor = out[key]
            out[key] = torch.cat([tensor, tensor.new_zeros(padded - tensor.shape[0], *tensor.shape[1:])])
    return out
