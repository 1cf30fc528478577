"""Weights between the native model (backend=torch) and megatron-core's GPTModel, both ways, as full (unsharded)
state dicts. Pure tensor shuffling: no megatron import.

Megatron stores attention as one `linear_qkv` whose rows go query group by query group ([the group's query heads,
its key head, its value head]), and SwiGLU as one `linear_fc1` = [gate (w1); up (w3)]. Routed experts are
SequentialMLP's `local_experts.<e>`; the native model stacks them in (experts, ...) tensors.
"""
from __future__ import annotations

from typing import Any

import torch

_LAYER = "decoder.layers.{i}."


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


def _is_moe_layer(model: Any, index: int) -> bool:
    return model.moe.num_experts > 0 and index >= model.moe.first_dense_layers


def native_to_megatron(state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
    """The native model's state dict (names of backends/torch/model.py) under megatron-core's GPTModel names."""
    if model.mla.enabled:
        raise ValueError(f"model={model.name}: converting multi-latent attention weights is not supported yet")
    groups = model.num_kv_heads
    out = {"embedding.word_embeddings.weight": state["tok_embeddings.weight"],
           "decoder.final_layernorm.weight": state["norm.weight"]}
    if not model.tie_embeddings:
        out["output_layer.weight"] = state["output.weight"]
    for i in range(model.num_layers):
        src, dst = f"layers.{i}.", _LAYER.format(i=i)
        attn = src + "attention."
        out[dst + "input_layernorm.weight"] = state[src + "attention_norm.weight"]
        out[dst + "self_attention.linear_qkv.weight"] = _qkv(state[attn + "wq.weight"], state[attn + "wk.weight"],
                                                             state[attn + "wv.weight"], groups)
        if model.qkv_bias:
            out[dst + "self_attention.linear_qkv.bias"] = _qkv(state[attn + "wq.bias"], state[attn + "wk.bias"],
                                                               state[attn + "wv.bias"], groups)
        if model.qk_norm:
            out[dst + "self_attention.q_layernorm.weight"] = state[attn + "q_norm.weight"]
            out[dst + "self_attention.k_layernorm.weight"] = state[attn + "k_norm.weight"]
        out[dst + "self_attention.linear_proj.weight"] = state[attn + "wo.weight"]
        out[dst + "pre_mlp_layernorm.weight"] = state[src + "ffn_norm.weight"]
        ffn = src + "feed_forward."
        if not _is_moe_layer(model, i):
            out[dst + "mlp.linear_fc1.weight"] = torch.cat([state[ffn + "w1.weight"], state[ffn + "w3.weight"]])
            out[dst + "mlp.linear_fc2.weight"] = state[ffn + "w2.weight"]
            continue
        out[dst + "mlp.router.weight"] = state[ffn + "router.weight"]
        if ffn + "expert_bias" in state:
            out[dst + "mlp.router.expert_bias"] = state[ffn + "expert_bias"]
        for e in range(model.moe.num_experts):
            expert = dst + f"mlp.experts.local_experts.{e}."
            out[expert + "linear_fc1.weight"] = torch.cat([state[ffn + "w1"][e], state[ffn + "w3"][e]])
            out[expert + "linear_fc2.weight"] = state[ffn + "w2"][e]
        if ffn + "shared.w1.weight" in state:
            out[dst + "mlp.shared_experts.linear_fc1.weight"] = torch.cat([state[ffn + "shared.w1.weight"],
                                                                           state[ffn + "shared.w3.weight"]])
            out[dst + "mlp.shared_experts.linear_fc2.weight"] = state[ffn + "shared.w2.weight"]
    return out


def megatron_to_native(state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
    """megatron-core GPTModel weights (full, unpadded vocabulary) under the native model's names."""
    if model.mla.enabled:
        raise ValueError(f"model={model.name}: converting multi-latent attention weights is not supported yet")
    head_dim = model.head_dim or model.hidden_size // model.num_attention_heads
    vocab = model.vocab_size
    out = {"tok_embeddings.weight": state["embedding.word_embeddings.weight"][:vocab],
           "norm.weight": state["decoder.final_layernorm.weight"]}
    if not model.tie_embeddings:
        out["output.weight"] = state["output_layer.weight"][:vocab]
    for i in range(model.num_layers):
        src, dst = _LAYER.format(i=i), f"layers.{i}."
        attn = dst + "attention."
        out[dst + "attention_norm.weight"] = state[src + "input_layernorm.weight"]
        q, k, v = _split_qkv(state[src + "self_attention.linear_qkv.weight"], model.num_kv_heads, head_dim,
                             model.num_attention_heads)
        out.update({attn + "wq.weight": q, attn + "wk.weight": k, attn + "wv.weight": v})
        if model.qkv_bias:
            q, k, v = _split_qkv(state[src + "self_attention.linear_qkv.bias"], model.num_kv_heads, head_dim,
                                 model.num_attention_heads)
            out.update({attn + "wq.bias": q, attn + "wk.bias": k, attn + "wv.bias": v})
        if model.qk_norm:
            out[attn + "q_norm.weight"] = state[src + "self_attention.q_layernorm.weight"]
            out[attn + "k_norm.weight"] = state[src + "self_attention.k_layernorm.weight"]
        out[attn + "wo.weight"] = state[src + "self_attention.linear_proj.weight"]
        out[dst + "ffn_norm.weight"] = state[src + "pre_mlp_layernorm.weight"]
        ffn = dst + "feed_forward."
        if not _is_moe_layer(model, i):
            out[ffn + "w1.weight"], out[ffn + "w3.weight"] = state[src + "mlp.linear_fc1.weight"].chunk(2)
            out[ffn + "w2.weight"] = state[src + "mlp.linear_fc2.weight"]
            continue
        out[ffn + "router.weight"] = state[src + "mlp.router.weight"]
        if src + "mlp.router.expert_bias" in state:
            out[ffn + "expert_bias"] = state[src + "mlp.router.expert_bias"]
        experts = [src + f"mlp.experts.local_experts.{e}." for e in range(model.moe.num_experts)]
        gates_ups = [state[expert + "linear_fc1.weight"].chunk(2) for expert in experts]
        out[ffn + "w1"] = torch.stack([gate for gate, _ in gates_ups])
        out[ffn + "w3"] = torch.stack([up for _, up in gates_ups])
        out[ffn + "w2"] = torch.stack([state[expert + "linear_fc2.weight"] for expert in experts])
        if src + "mlp.shared_experts.linear_fc1.weight" in state:
            out[ffn + "shared.w1.weight"], out[ffn + "shared.w3.weight"] = state[src + "mlp.shared_experts.linear_fc1.weight"].chunk(2)
            out[ffn + "shared.w2.weight"] = state[src + "mlp.shared_experts.linear_fc2.weight"]
    return out


def pad_vocabulary(state: dict[str, torch.Tensor], padded: int) -> dict[str, torch.Tensor]:
    """Zero rows for Megatron's padded vocabulary entries (embedding and output layer)."""
    out = dict(state)
    for key in ("embedding.word_embeddings.weight", "output_layer.weight"):
        if key in out and out[key].shape[0] < padded:
            tensor = out[key]
            out[key] = torch.cat([tensor, tensor.new_zeros(padded - tensor.shape[0], *tensor.shape[1:])])
    return out
