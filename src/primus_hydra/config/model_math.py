"""Closed-form parameter and FLOP counts for a model preset (conf/model/*.yaml).

Pure Python, never imports torch: `model` is anything with the ModelConfig attributes (an OmegaConf DictConfig,
the dataclass, a SimpleNamespace). The counts follow the layout of the native PyTorch model and of the Hugging
Face checkpoints (names in comments):

- embeddings V*h; output layer V*h unless tie_embeddings; final norm h; two RMSNorm weights (h each) per layer.
- GQA attention: q h*(heads*hd), k and v h*(kv*hd) each, o (heads*hd)*h; biases on q/k/v only when qkv_bias,
  on o (h) when attention_output_bias; qk_norm adds two RMSNorm weights of size hd; attention_sinks one logit per
  head. hd = head_dim or hidden_size // num_attention_heads.
- MLA (DeepSeek): q_a_proj h*q_lora + q_a_layernorm q_lora + q_b_proj q_lora*(heads*(nope+rope)), or
  q_proj h*(heads*(nope+rope)) when q_lora_rank is null; kv_a_proj_with_mqa h*(kv_lora+rope),
  kv_a_layernorm kv_lora, kv_b_proj kv_lora*(heads*(nope+v)), o_proj (heads*v)*h. No biases.
- dense SwiGLU FFN 3*h*ffn. MoE layers (is_moe_layer: after first_dense_layers, every interleave_step-th): router
  h*E (+E with router_bias), +E when router_enable_expert_bias (DeepSeek-V3's e_score_correction_bias, stored in
  the checkpoint); experts E*3*h*moe_ffn (+E*(2*moe_ffn + h) with experts_bias); shared experts 3*h*shared_ffn
  (shared_expert_ffn_hidden_size, or shared_experts*moe_ffn). Multi-token-prediction modules are not counted.
- per layer, a full-attention layer of a sliding-window model takes model.global_attention's head width and kv heads
  (shared_kv: one projection for K and V); family=gemma4 adds norms after attention and after the FFN (2h per layer)
  and, in MoE layers, three branch norms, the router's input scale (h) and per-expert scales (E).
- normalization=layernorm: every norm has a bias beside its weight; position_embedding=learned_absolute: a table
  max_position_embeddings*h beside the embeddings.
- a hybrid model (model.hybrid.layer_pattern): config/hybrid_math.py; its attention FLOPs come from the * layers
  only, and the mixers' scans are not counted beyond their projections.
"""
from __future__ import annotations

from typing import Any, Optional

from primus_hydra.config.attention_math import attention_block_weights, query_key_head_dim, value_head_dim
from primus_hydra.config.attention_window import attended_keys, layer_kinds
from primus_hydra.config.hybrid_math import hybrid_layer_counts, mixer_layer_weights, norm_weights
from primus_hydra.config.schema_model import GEMMA4_FAMILY

SWIGLU_MATRICES = 3  # gate, up and down projections


def is_gemma4_layer(model: Any) -> bool:
    """Gemma 4's layer (family=gemma4): norms after attention and after the MLP; in MoE layers norms around each
    branch, the router's input scale and a scale per expert."""
    return str(getattr(model, "family", "")) == GEMMA4_FAMILY


def _is_hybrid(model: Any) -> bool:
    return model.hybrid.layer_pattern is not None


def is_moe_layer(model: Any, layer: int) -> bool:
    """Whether decoder layer `layer` (from 0) of a transformer has the MoE FFN: after the first_dense_layers, every
    interleave_step-th layer (Llama 4 counts them from 1: with a step of 2, layers 1, 3, 5, ...)."""
    moe = model.moe
    step = int(getattr(moe, "interleave_step", 1) or 1)
    return moe.num_experts > 0 and layer >= moe.first_dense_layers and (layer + 1) % step == 0


def _num_moe_layers(model: Any) -> int:
    if _is_hybrid(model):
        return hybrid_layer_counts(model)["E"]
    return sum(is_moe_layer(model, layer) for layer in range(model.num_layers))


def num_attention_layers(model: Any) -> int:
    """Layers with an attention block: every layer of a transformer, the * layers of a hybrid pattern."""
    return hybrid_layer_counts(model)["*"] if _is_hybrid(model) else model.num_layers


def shared_expert_ffn_hidden_size(model: Any) -> int:
    moe = model.moe
    if moe.shared_expert_ffn_hidden_size is not None:
        return int(moe.shared_expert_ffn_hidden_size)
    return moe.shared_experts * moe.ffn_hidden_size


def moe_layer_weights(model: Any, experts: int) -> tuple[int, int]:
    """(matmul weights, other weights) of one MoE FFN block holding `experts` routed experts."""
    h, moe = model.hidden_size, model.moe
    matmul = h * moe.num_experts  # router
    matmul += experts * SWIGLU_MATRICES * h * moe.ffn_hidden_size
    matmul += SWIGLU_MATRICES * h * shared_expert_ffn_hidden_size(model)
    biases = moe.num_experts * (moe.router_enable_expert_bias + moe.router_bias)  # the expert bias, the router's
    if is_gemma4_layer(model):  # three branch norms, the router's input scale (h) and its per-expert scales (E)
        biases += 3 * norm_weights(model, h) + h + moe.num_experts
    return matmul, biases + (experts * (2 * moe.ffn_hidden_size + h) if moe.experts_bias else 0)


def _transformer_weights(model: Any, active: bool) -> tuple[int, int]:
    """(matmul weights, other weights) of all layers plus the final norm; active: top_k experts only."""
    h = model.hidden_size
    moe_layers = _num_moe_layers(model)
    if _is_hybrid(model):  # single-purpose layers, each with its own input norm
        counts = hybrid_layer_counts(model)
        attn_matmul, attn_other = attention_block_weights(model)
        mixer_matmul, mixer_other = mixer_layer_weights(model) if counts["M"] else (0, 0)
        dense_layers = counts["-"]
        matmul = counts["M"] * mixer_matmul + counts["*"] * attn_matmul
        other = counts["M"] * mixer_other + counts["*"] * attn_other
        other += (counts["*"] + counts["-"] + counts["E"]) * norm_weights(model, h)
    else:
        dense_layers = model.num_layers - moe_layers
        kinds = [(attention_block_weights(model, layer), count)
                 for layer, count in layer_kinds(model, model.num_layers)]
        matmul = sum(weights[0] * count for weights, count in kinds)
        norms_per_layer = (4 if is_gemma4_layer(model) else 2) * norm_weights(model, h)
        other = sum(weights[1] * count for weights, count in kinds) + model.num_layers * norms_per_layer
    matmul += dense_layers * SWIGLU_MATRICES * h * model.ffn_hidden_size
    other += norm_weights(model, h)
    if moe_layers:
        experts = model.moe.top_k if active else model.moe.num_experts
        moe_matmul, moe_other = moe_layer_weights(model, experts)
        matmul, other = matmul + moe_layers * moe_matmul, other + moe_layers * moe_other
    return matmul, other


def padded_vocab(vocab_size: int, tp: int, divisible_by: Optional[int]) -> int:
    """The vocabulary a backend's embedding holds: Megatron pads it up to a multiple of divisible_by x tp (its
    make_vocab_size_divisible_by); None is a backend that does not pad."""
    if divisible_by is None:
        return vocab_size
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple


def count_embedding_parameters(model: Any) -> int:
    """The input embedding table V*h (with tie_embeddings it is also the output layer)."""
    return model.vocab_size * model.hidden_size


def count_position_table_parameters(model: Any) -> int:
    """The learned position table max_position_embeddings*h of position_embedding=learned_absolute, else 0."""
    if str(getattr(model, "position_embedding", "rope")) != "learned_absolute":
        return 0
    return model.max_position_embeddings * model.hidden_size


def count_output_layer_parameters(model: Any) -> int:
    """The output projection's own weights: 0 when tied to the embedding table."""
    return 0 if model.tie_embeddings else model.vocab_size * model.hidden_size


def count_parameters(model: Any) -> int:
    """All parameters of the model (every expert)."""
    matmul, other = _transformer_weights(model, active=False)
    embeddings = count_embedding_parameters(model) + count_position_table_parameters(model)
    return embeddings + count_output_layer_parameters(model) + matmul + other


def count_active_parameters(model: Any) -> int:
    """Parameters one token uses: as count_parameters, but only top_k routed experts (plus shared) per MoE layer."""
    matmul, other = _transformer_weights(model, active=True)
    embeddings = count_embedding_parameters(model) + count_position_table_parameters(model)
    return embeddings + count_output_layer_parameters(model) + matmul + other


def count_active_matmul_parameters(model: Any) -> int:
    """Weights of the matrix multiplies one token goes through, output layer included (tied or not).

    Excludes the input embedding (a lookup), norms, biases and the expert bias.
    """
    matmul, _ = _transformer_weights(model, active=True)
    return matmul + model.vocab_size * model.hidden_size


def training_flops_per_token(model: Any, seq_length: int) -> float:
    """Model FLOPs of one training step (forward + backward) per token, the PaLM / Megatron MFU convention.

        6 * N + 6 * L * T * heads * (qk_head_dim + v_head_dim)

    N = count_active_matmul_parameters (non-embedding matmul weights a token uses, plus the output layer);
    6 = 2 FLOPs per multiply-add x 3 (forward, and backward for inputs and weights). The second term is the
    attention score (q.k) and context (p.v) products over T = seq_length keys; with qk = v = Q head width it is
    PaLM's 12 * L * H * Q * T (Chowdhery et al. 2022, appendix B). No causal-mask halving is applied (as in
    PaLM and Megatron-LM); a sliding-window layer counts min(T, window) keys; activation recomputation is not
    counted. Norms, softmax and rotary are ignored.
    """
    attention = 6 * model.num_attention_heads * sum(
        count * attended_keys(model, layer, seq_length) * (query_key_head_dim(model, layer) + value_head_dim(model, layer))
        for layer, count in layer_kinds(model, num_attention_layers(model)))
    return float(6 * count_active_matmul_parameters(model) + attention)

