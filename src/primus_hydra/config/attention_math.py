"""The attention block's head widths and weights, per layer: a full-attention layer of a sliding-window model takes
model.global_attention's head width and KV heads (Gemma 4's global layers), the others the model's own. Pure Python,
as model_math (which counts everything else and re-exports these)."""
from __future__ import annotations

from typing import Any

from primus_hydra.config.attention_window import is_sliding_window_layer
from primus_hydra.config.hybrid_math import norm_weights


def attention_head_dim(model: Any) -> int:
    """The per-head width of GQA attention: head_dim if set, else hidden_size // num_attention_heads."""
    return int(model.head_dim) if model.head_dim is not None else model.hidden_size // model.num_attention_heads


def query_key_head_dim(model: Any, layer: int = 0) -> int:
    """The width of one head in the q.k dot product of attention layer `layer` (MLA: nope + rope part)."""
    if model.mla.enabled:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
    return layer_attention_shape(model, layer)[0]


def value_head_dim(model: Any, layer: int = 0) -> int:
    return model.mla.v_head_dim if model.mla.enabled else layer_attention_shape(model, layer)[0]


def layer_attention_shape(model: Any, layer: int) -> tuple[int, int, bool]:
    """(head width, kv heads, whether one projection gives K and V) of attention layer `layer` (from 0): a
    full-attention layer (not is_sliding_window_layer) takes model.global_attention's values where they are set."""
    head_dim, kv_heads, shared = attention_head_dim(model), model.num_kv_heads, False
    wide = getattr(model, "global_attention", None)
    if wide is not None and not is_sliding_window_layer(model, layer):
        head_dim, kv_heads = wide.head_dim or head_dim, wide.num_kv_heads or kv_heads
        shared = bool(wide.shared_kv)
    return int(head_dim), int(kv_heads), shared


def attention_block_weights(model: Any, layer: int = 0) -> tuple[int, int]:
    """(matmul weights, other weights: biases and norms) of the attention block of layer `layer`."""
    h, heads = model.hidden_size, model.num_attention_heads
    if model.mla.enabled:
        mla = model.mla
        q_width = heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)
        if mla.q_lora_rank:
            query, query_norm = h * mla.q_lora_rank + mla.q_lora_rank * q_width, norm_weights(model, mla.q_lora_rank)
        else:
            query, query_norm = h * q_width, 0
        key_value = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        key_value += mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        output = heads * mla.v_head_dim * h
        return query + key_value + output, query_norm + norm_weights(model, mla.kv_lora_rank)
    hd, kv_heads, shared_kv = layer_attention_shape(model, layer)
    q_width, kv_width = heads * hd, kv_heads * hd
    kv_projections = 1 if shared_kv else 2
    matmul = h * q_width + kv_projections * h * kv_width + q_width * h
    other = (q_width + kv_projections * kv_width if model.qkv_bias else 0)
    other += 2 * norm_weights(model, hd) if model.qk_norm else 0
    return matmul, other + (h if model.attention_output_bias else 0) + (heads if model.attention_sinks else 0)
