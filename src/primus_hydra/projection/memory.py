"""Bytes per GPU: weights, gradients, optimizer state, activations and overhead on each pipeline stage.

Byte rules per parameter a rank holds (parameters.py), by backend:
- megatron, megatron_bridge (bf16): Megatron-LM's theoretical_memory_usage.py: 2 (bf16 weights) + 4 (fp32 main
  gradients) + 12 (fp32 master weights and two Adam moments) = 18; with the distributed optimizer the 12 are
  sharded over the data-parallel group: 6 + 12/dp (routed experts over the expert data-parallel group). fp32
  training: 4 + 4 + 8 (no master copy). Megatron FSDP (module.parallel.fsdp): everything over dp.
- torch (native, fp32 master weights, AdamW): 4 + 4 + 8; DDP keeps a bucketed copy of the gradients (+4,
  overhead); FSDP2 shards all three over dp and gathers two blocks (plus the root: embeddings, norm, output) at a
  time (overhead). bf16 autocast keeps bf16 copies of the matmul weights for backward (+2, overhead).
- torchtitan: FSDP2 / DDP as the native backend, with bf16 gathered parameters under bf16.
"""
from __future__ import annotations

from typing import Any

from primus_hydra.backends.megatron.pipeline_layout import layout_stages, rank_layer_ids
from primus_hydra.config.layout import stage_layers
from primus_hydra.config.model_math import padded_vocab
from primus_hydra.projection import activations
from primus_hydra.projection.layout import Layout
from primus_hydra.projection.parameters import (
    RankParameters,
    attention_parameters,
    ffn_parameters,
    rank_parameters,
    stage_layer_ids,
)
from primus_hydra.util.records import record

GIB = 1024.0 ** 3


@record(frozen=True)
class StageMemory:
    stage: int
    parameters: RankParameters
    weights: float  # bytes
    gradients: float
    optimizer: float
    activations: float
    overhead: float
    # backend=torch frees gradients between steps: its peak is the larger of the end of the forward pass (no
    # gradients yet) and the end of the backward pass (no activations left); 0: everything lives at once
    peak_without_gradients: float

    @property
    def total(self) -> float:
        if self.peak_without_gradients:
            return self.peak_without_gradients
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def gib(self) -> dict:
        return {"weights": self.weights / GIB, "gradients": self.gradients / GIB, "optimizer": self.optimizer / GIB,
                "activations": self.activations / GIB, "overhead": self.overhead / GIB, "total": self.total / GIB}


def activation_bytes(layout: Layout) -> int:
    return 4 if layout.precision == "fp32" else 2


def expert_data_parallel(layout: Layout) -> int:
    return max(1, layout.world // (layout.ep * layout.etp * layout.pp))


def _largest_block(model: Any, layout: Layout) -> float:
    """Parameters of the largest transformer block a rank gathers under FSDP (after tp / ep splits)."""
    attn_split, attn_rep = attention_parameters(model)
    largest = 0.0
    for layer in {0, model.num_layers - 1}:
        ffn_split, ffn_rep, experts = ffn_parameters(model, layer)
        largest = max(largest, (attn_split + ffn_split) / layout.tp + attn_rep + ffn_rep + experts / (layout.ep * layout.etp))
    return largest


def stage_memory(model: Any, layout: Layout, seq: int, stage: int, layer_ids: list[int], runtime_overhead: float) -> StageMemory:
    traits = layout.traits
    pad = traits.vocab_pad_multiple
    first, last = stage == 0, stage == layout.pp - 1
    params = rank_parameters(model, tp=layout.tp, ep=layout.ep, layer_ids=layer_ids, first_stage=first,
                             last_stage=last, pp=layout.pp, pad_multiple=pad)
    dp, edp = layout.dp * layout.cp, expert_data_parallel(layout)
    act = activation_bytes(layout)
    bf16 = layout.precision != "fp32"
    overhead = runtime_overhead
    weight_bytes, grad_bytes, opt_bytes = traits.state_bytes(layout.precision)
    if traits.distributed_optimizer:
        if layout.fsdp:
            shard, expert_shard = dp, edp
            weights = params.dense * weight_bytes / shard + params.expert * weight_bytes / expert_shard
            gradients = params.dense * grad_bytes / shard + params.expert * grad_bytes / expert_shard
            overhead += 2 * _largest_block(model, layout) * weight_bytes  # gathered blocks
        else:
            weights = params.total * weight_bytes
            gradients = params.total * grad_bytes
            shard, expert_shard = (dp, edp) if layout.distributed_optimizer else (1, 1)
        optimizer = params.dense * opt_bytes / shard + params.expert * opt_bytes / expert_shard
    else:  # PyTorch's DDP or FSDP2 (the JAX backends projected with the same rules)
        shard = dp if layout.fsdp else 1
        expert_shard = edp if layout.fsdp else 1
        total_shard = params.dense / shard + params.expert / expert_shard
        weights, gradients, optimizer = total_shard * weight_bytes, total_shard * grad_bytes, total_shard * opt_bytes
        if layout.fsdp:  # gathered blocks (current and prefetched) plus the unsharded root
            gathered = 2 if bf16 and traits.bf16_parameter_gathers else 4
            vocab = padded_vocab(model.vocab_size, layout.tp, pad) * model.hidden_size
            root = vocab * ((1 if first else 0) + (1 if last and not model.tie_embeddings else 0)) / layout.tp
            overhead += (2 * _largest_block(model, layout) + root) * gathered
        elif layout.dp > 1:
            overhead += params.total * 4  # DDP's gradient buckets
        if bf16 and traits.bf16_by_autocast:
            overhead += params.total * 2  # autocast's bf16 weight copies, kept for backward
    tokens = layout.micro_batch * seq / layout.cp
    per_micro_batch = 0.0
    for layer in layer_ids:
        if traits.native_activations:
            per_micro_batch += activations.native_layer(model, layer, tokens=tokens, tp=layout.tp, act_bytes=4 if not bf16 else 3)  # bf16: fp32 residual and norms, bf16 matmul outputs
        else:
            per_micro_batch += activations.megatron_layer(model, layer, tokens=tokens, seq=seq, tp=layout.tp,
                                                          sp=layout.sequence_parallel, recompute=layout.recompute,
                                                          flash=layout.flash_attention, act_bytes=act, etp=layout.etp)
    in_flight = activations.pipeline_in_flight(layout, stage)
    stored = per_micro_batch * in_flight
    if layout.recompute == "full" and layer_ids:  # one layer's full working set while it is recomputed
        stored += activations.megatron_layer(model, layer_ids[-1], tokens=tokens, seq=seq, tp=layout.tp,
                                             sp=layout.sequence_parallel, recompute="none",
                                             flash=layout.flash_attention, act_bytes=act, etp=layout.etp)
    if first and not traits.native_activations:
        stored += tokens * model.hidden_size * act * in_flight / (layout.tp if layout.sequence_parallel else 1)
    if last:
        stored += activations.output_layer(model, tokens=tokens, tp=layout.tp, sp=layout.sequence_parallel,
                                           native=traits.native_activations, act_bytes=4 if not bf16 else 2,
                                           padded_vocab=padded_vocab(model.vocab_size, layout.tp, pad))
    # gradients set to None every step: at the end of the forward pass no gradient exists yet,
    # at the end of the backward pass every gradient does and the activations are gone (one micro-batch a step)
    without_gradients = 0.0
    if traits.frees_gradients_between_steps and layout.grad_accum == 1:  # accumulated: they outlive micro-batch 1
        without_gradients = max(weights + optimizer + stored + overhead, weights + optimizer + gradients + overhead)
    return StageMemory(stage, params, weights, gradients, optimizer, stored, overhead, without_gradients)


def stage_split(model: Any, layout: Layout) -> list[list[int]]:
    """The transformer layers each pipeline rank holds (over all its virtual stages)."""
    if layout.pipeline_layout is not None:
        return rank_layer_ids(layout_stages(layout.pipeline_layout), layout.pp)
    return stage_layer_ids(stage_layers(model.num_layers, layout.pp, layout.first_stage_layers, layout.last_stage_layers))


def most_loaded_stage(model: Any, layout: Layout, seq: int, runtime_overhead: float) -> StageMemory:
    stages = [stage_memory(model, layout, seq, index, ids, runtime_overhead) for index, ids in enumerate(stage_split(model, layout))]
    return max(stages, key=lambda stage: stage.total)
