"""How many eager ops a step dispatches on the host, for hardware whose host is the device (the CPU).

Counted from backends/torch/model.py and optim.py, forward plus backward, then fitted on this CPU (the counts
with the per-op cost, docs/projection.md "Calibration"): a dense layer ~35 forward ops (two RMSNorms of 6, rotary
6 each for q and k, three projections, SDPA, the output projection, SwiGLU's five, two residual adds) -> 80;
a MoE layer dispatches its experts one by one (~20 forward ops each: select, nonzero, gather, three matmuls,
SwiGLU, weighting, index_add -> 64 with backward) after ~25 routing ops. The loss and embedding ~20. AdamW (foreach=False, for
reproducibility) and gradient clipping ~15 ops per parameter tensor. Under tensor parallelism the parallelised
projections run as DTensors (3 ops each: forward and two backward), and so does the optimizer on their weights;
under FSDP2 every parameter is a sharded DTensor.
"""
from __future__ import annotations

from typing import Any

from primus_hydra.config.model_math import is_moe_layer
from primus_hydra.util.records import record

DENSE_LAYER_OPS = 80
ATTENTION_OPS = 60  # the attention half of a layer, norms and residuals included
ROUTING_OPS = 25
OPS_PER_EXPERT = 64
LOSS_OPS = 20
OPTIMIZER_OPS_PER_TENSOR = 15
TP_LINEARS_PER_LAYER = 7  # wq, wk, wv, wo, w1, w3, w2 (backends/torch/parallelize.py's plan)


@record(frozen=True)
class HostOps:
    plain: float  # ops on plain tensors per step
    dtensor: float  # ops on DTensors per step


def _layer_tensors(model: Any, layer: int) -> int:
    """Parameter tensors of one native layer (2 norms, 4 attention projections, FFN)."""
    attention = 4 + (2 if model.qk_norm else 0) + (3 if model.qkv_bias else 0)
    if model.mla.enabled:
        attention = 5 + (2 if model.mla.q_lora_rank else 0)
    if not is_moe_layer(model, layer):
        return 2 + attention + 3
    return 2 + attention + 4 + (3 if model.moe.shared_experts else 0)


def step_host_ops(model: Any, layer_ids: list[int], micro_batches: int, *, tp: int, fsdp: bool,
                  first: bool, last: bool) -> HostOps:
    forward_backward = 0.0
    for layer in layer_ids:
        if is_moe_layer(model, layer):
            forward_backward += ATTENTION_OPS + ROUTING_OPS + OPS_PER_EXPERT * model.moe.num_experts
        else:
            forward_backward += DENSE_LAYER_OPS
    forward_backward += LOSS_OPS if (first or last) else 0
    tensors = sum(_layer_tensors(model, layer) for layer in layer_ids) + (1 if first else 0) + (2 if last else 0)
    optimizer = OPTIMIZER_OPS_PER_TENSOR * tensors
    dtensor = 0.0
    if tp > 1:
        parallel_tensors = TP_LINEARS_PER_LAYER * len(layer_ids) + (1 if first else 0) + (1 if last else 0)
        dtensor += micro_batches * 3 * parallel_tensors + OPTIMIZER_OPS_PER_TENSOR * parallel_tensors
        optimizer -= OPTIMIZER_OPS_PER_TENSOR * parallel_tensors
    if fsdp:
        dtensor += optimizer
        optimizer = 0.0
    return HostOps(plain=micro_batches * forward_backward + optimizer, dtensor=dtensor)
