"""Where a model's parameters live: per pipeline stage and per rank of a layout.

Built on config/model_math.py's exact counts, split the way Megatron-Core (and the native backend) place them:
- tensor parallelism splits attention and dense/shared-expert FFN matrices over tp; norms, the router and the
  expert bias are replicated on every tp rank; MLA's down projections (q_a, kv_a) are replicated too;
- routed experts are split over ep x etp (Megatron's expert_tensor_parallel_size, here = tp when ep = 1, else 1);
- the embedding (vocabulary padded to a multiple of pad_multiple x tp, Megatron's make_vocab_size_divisible_by;
  None: not padded)
  lives on the first stage, the final norm and output layer on the last; with tied embeddings and pp > 1 the last
  stage holds its own copy of the embedding for the output layer (Megatron's shared word embeddings).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from primus_hydra.config import model_math
from primus_hydra.config.attention_math import layer_attention_shape
from primus_hydra.config.hybrid_math import mixer_layer_weights, norm_weights
from primus_hydra.util.records import record


@record(frozen=True)
class RankParameters:
    """The parameters one rank holds (already divided by its shards, before FSDP / distributed-optimizer sharding)."""

    dense: float  # split over tp or replicated: sharded by the data-parallel group (dp x cp)
    expert: float  # routed experts: sharded by the expert data-parallel group
    layers: int  # transformer layers on this rank's stage(s)

    @property
    def total(self) -> float:
        return self.dense + self.expert


def attention_parameters(model: Any, layer: int = 0) -> tuple[int, int]:
    """(weights split over tp, weights every tp rank holds) of layer `layer`'s attention block, its input norm
    included (and Gemma 4's norm after it)."""
    h, heads = model.hidden_size, model.num_attention_heads
    if model.mla.enabled:
        mla = model.mla
        q_width = heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)
        split = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim) + heads * mla.v_head_dim * h
        replicated = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank + h
        if mla.q_lora_rank:
            split += mla.q_lora_rank * q_width
            replicated += h * mla.q_lora_rank + mla.q_lora_rank
        else:
            split += h * q_width
        return split, replicated
    hd, kv_heads, shared_kv = layer_attention_shape(model, layer)
    q_width, kv_width, kv_projections = heads * hd, kv_heads * hd, 1 if shared_kv else 2
    split = 2 * h * q_width + kv_projections * h * kv_width
    split += q_width + kv_projections * kv_width if model.qkv_bias else 0
    split += heads if model.attention_sinks else 0  # one logit per head, split with the heads
    replicated = h + (2 * hd if model.qk_norm else 0) + (h if model.attention_output_bias else 0)
    return split, replicated + (h if model_math.is_gemma4_layer(model) else 0)


def ffn_parameters(model: Any, layer: int) -> tuple[int, int, int]:
    """(weights split over tp, replicated weights, routed-expert weights of all experts) of layer `layer`'s FFN
    block, its input norm included."""
    return _ffn_block(model, model_math.is_moe_layer(model, layer))


def _ffn_block(model: Any, moe_layer: bool) -> tuple[int, int, int]:
    h, moe = model.hidden_size, model.moe
    norms = h * (2 if model_math.is_gemma4_layer(model) else 1)  # its input norm (and Gemma 4's after it)
    if not moe_layer:
        return model_math.SWIGLU_MATRICES * h * model.ffn_hidden_size, norms, 0
    shared = model_math.SWIGLU_MATRICES * h * model_math.shared_expert_ffn_hidden_size(model)
    matmul, other = model_math.moe_layer_weights(model, moe.num_experts)
    experts = matmul - shared - h * moe.num_experts  # the routed experts' matrices (the router is replicated)
    expert_biases = moe.num_experts * (2 * moe.ffn_hidden_size + h) if moe.experts_bias else 0
    return shared, norms + h * moe.num_experts + other - expert_biases, experts + expert_biases


def layer_parameters(model: Any, layer: int) -> tuple[int, int, int]:
    """(weights split over tp, replicated weights, routed-expert weights) of layer `layer`: attention and FFN in a
    transformer; in a hybrid model the one block its letter of model.hybrid.layer_pattern names (a mixer layer's
    weights are split over tp by heads, its input norm replicated)."""
    pattern = model.hybrid.layer_pattern if hasattr(model, "hybrid") else None
    if pattern is None:
        attn_split, attn_replicated = attention_parameters(model, layer)
        ffn_split, ffn_replicated, ffn_experts = ffn_parameters(model, layer)
        return attn_split + ffn_split, attn_replicated + ffn_replicated, ffn_experts
    letter, norm = pattern[layer], norm_weights(model, model.hidden_size)
    if letter == "M":
        matmul, other = mixer_layer_weights(model)
        return matmul + other - norm, norm, 0
    if letter == "*":
        return (*attention_parameters(model), 0)
    return _ffn_block(model, moe_layer=letter == "E")  # a hybrid's letter decides, not the layer's index


def rank_parameters(model: Any, *, tp: int, ep: int, layer_ids: Sequence[int], first_stage: bool, last_stage: bool,
                    pp: int, pad_multiple: Optional[int]) -> RankParameters:
    """What one rank of a stage holding `layer_ids` keeps."""
    etp = tp if ep == 1 else 1
    split = replicated = experts = 0.0
    for layer in layer_ids:
        layer_split, layer_replicated, layer_experts = layer_parameters(model, layer)
        split += layer_split
        replicated += layer_replicated
        experts += layer_experts
    vocab = model_math.padded_vocab(model.vocab_size, tp, pad_multiple)
    embedding = vocab * model.hidden_size
    if first_stage:
        split += embedding
        replicated += model_math.count_position_table_parameters(model)
    if last_stage:
        replicated += model.hidden_size  # final norm
        if not model.tie_embeddings or pp > 1:
            split += embedding
    return RankParameters(dense=split / tp + replicated, expert=experts / (ep * etp), layers=len(layer_ids))


def stage_layer_ids(stages: Sequence[int]) -> list[list[int]]:
    ids, start = [], 0
    for count in stages:
        ids.append(list(range(start, start + count)))
        start += count
    return ids
