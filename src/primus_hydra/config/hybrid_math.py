"""Parameter counts of a hybrid (state-space) model's layers, as megatron-core's MambaStack builds them: one
single-purpose layer per letter of model.hybrid.layer_pattern, each with its own input norm (fused into the first
linear layer in the Transformer Engine specs; the same weights).

- M, mixer=mamba2 (megatron-core's MambaMixer): in_proj h x (2 d_inner + 2 G N + H) for z, x, B, C and dt;
  a depthwise conv1d of width 4 with bias over x, B, C (d_inner + 2 G N channels); dt_bias, A_log and D, one per
  head; the gated RMSNorm's weight (d_inner); out_proj d_inner x h. H = mamba_num_heads or 2 h / mamba_head_dim,
  d_inner = H x mamba_head_dim, G groups, N = mamba_state_dim.
- M, mixer=gated_delta_net (megatron-core's and Primus's GatedDeltaNet): in_proj h x (2 K + 2 V + 2 Hv) for q, k,
  v, the output gate, beta and the decay; a depthwise conv1d without bias over q, k, v (2 K + V channels);
  dt_bias and A_log per value head; a norm over one value head (Dv); out_proj V x h.
  K = key heads x key head dim, V = value heads x value head dim.
- M, mixer=kimi_delta_attention (Primus's KimiDeltaAttention): in_proj h x (2 K + V + 2 Dv + Hv) for q, k, v, the
  two gate bottlenecks and beta; the conv1d as above; a norm of width h on the gate input; f_b_proj Dv x (Hv Dk);
  A_log per value head; dt_bias Hv x Dk; g_b_proj Dv x V with bias; a norm over one value head; out_proj V x h.
- * attention: the attention block of model_math (GQA or MLA) and its input norm.
- - MLP: SwiGLU 3 h ffn and its input norm. E MoE: model_math's MoE block and its input norm.
"""
from __future__ import annotations

from typing import Any

MAMBA_CONV_WIDTH = 4  # megatron-core's MambaMixer d_conv (its spec does not set another)


def norm_weights(model: Any, width: int) -> int:
    """One norm over `width` channels: a weight, and a bias for LayerNorm."""
    return width * (2 if str(model.normalization) == "layernorm" else 1)


def mamba_heads(model: Any) -> int:
    """megatron-core's MambaMixer: mamba_num_heads, else d_inner (2 x hidden_size) // mamba_head_dim."""
    hybrid = model.hybrid
    if hybrid.mamba_num_heads is not None:
        return int(hybrid.mamba_num_heads)
    return 2 * model.hidden_size // hybrid.mamba_head_dim


def mixer_layer_weights(model: Any) -> tuple[int, int]:
    """(matmul weights, other weights) of one M layer, its input norm included."""
    h, hybrid, mixer = model.hidden_size, model.hybrid, str(model.hybrid.mixer)
    if mixer == "mamba2":
        heads = mamba_heads(model)
        inner = heads * hybrid.mamba_head_dim
        b_and_c = 2 * hybrid.mamba_num_groups * hybrid.mamba_state_dim
        channels = inner + b_and_c
        matmul = h * (2 * inner + b_and_c + heads) + inner * h
        other = channels * (MAMBA_CONV_WIDTH + 1) + 3 * heads + inner + norm_weights(model, h)
        return matmul, other
    key_dim = hybrid.linear_num_key_heads * hybrid.linear_key_head_dim
    value_heads, value_head_dim = hybrid.linear_num_value_heads, hybrid.linear_value_head_dim
    value_dim = value_heads * value_head_dim
    conv = (2 * key_dim + value_dim) * hybrid.linear_conv_kernel_dim
    value_norm = norm_weights(model, value_head_dim)
    if mixer == "gated_delta_net":
        matmul = h * (2 * key_dim + 2 * value_dim + 2 * value_heads) + value_dim * h
        return matmul, conv + 2 * value_heads + value_norm + norm_weights(model, h)
    gate_dim = value_heads * hybrid.linear_key_head_dim
    matmul = h * (2 * key_dim + value_dim + 2 * value_head_dim + value_heads) + value_dim * h
    matmul += value_head_dim * gate_dim + value_head_dim * value_dim  # f_b_proj, g_b_proj
    other = conv + norm_weights(model, h) + value_heads + gate_dim + value_dim + value_norm
    return matmul, other + norm_weights(model, h)


def hybrid_layer_counts(model: Any) -> dict[str, int]:
    """How many layers of each letter the pattern has."""
    pattern = str(model.hybrid.layer_pattern)
    return {letter: pattern.count(letter) for letter in "M*-E"}
