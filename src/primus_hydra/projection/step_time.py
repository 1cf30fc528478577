"""Time of one optimizer step on the most loaded pipeline stage: compute, exposed communication, pipeline bubble.

- Compute per micro-batch: matmul FLOPs at `matmul_efficiency` of the peak, attention (causal: half the score and
  context products) at `attention_efficiency`, and elementwise traffic (three passes over the stored activations:
  written forward, read backward, gradients written) at the memory bandwidth. Recompute adds its forward again:
  full, the layers; selective, the core attention.
- Collectives (ring algorithms, nccl-tests' definitions): all-reduce 2(n-1)/n x bytes / bandwidth, all-gather and
  reduce-scatter (n-1)/n, all-to-all (n-1)/n, plus one latency per ring step. A group whose ranks fit in one node
  runs at the intra-node bandwidth, else at the inter-node one. Ranks are ordered tp, cp, dp, pp (Megatron's
  default order): tp neighbours are adjacent, a pp group strides over tp x cp x dp ranks.
- Exposed: tp and ep all-to-all are on the critical path (4 per layer and micro-batch: two forward, two
  backward); cp's ring exchange hides behind attention; data-parallel gradient reduction (and the distributed
  optimizer's parameter gather) hides behind the last micro-batch's backward (forward); FSDP's gathers and
  reduce-scatters behind each micro-batch's compute; pp sends 2 (m + pp - 1) activations on the critical path.
- Bubble: (pp - 1) / vpp micro-batch times (Narayanan et al. 2021).
- Optimizer: AdamW reads and writes ~28 bytes per parameter held (fp32 master, gradients, two moments).
"""
from __future__ import annotations

from typing import Any

from primus_hydra.config import model_math
from primus_hydra.projection import activations
from primus_hydra.projection.hardware import Hardware
from primus_hydra.projection.host_ops import step_host_ops
from primus_hydra.projection.layout import Layout
from primus_hydra.projection.memory import StageMemory, activation_bytes
from primus_hydra.projection.parameters import attention_parameters, ffn_parameters
from primus_hydra.util.records import record


@record(frozen=True)
class StepTime:
    compute: float
    optimizer: float
    tp: float
    cp: float
    ep: float
    dp: float
    pp: float
    bubble: float
    recompute_flops: float  # model FLOPs recompute adds on this rank per step (the MFU convention: no causal halving)

    @property
    def communication(self) -> float:
        return self.tp + self.cp + self.ep + self.dp + self.pp

    @property
    def total(self) -> float:
        return self.compute + self.optimizer + self.communication + self.bubble

    def as_dict(self) -> dict:
        return {"total": self.total, "compute": self.compute, "optimizer": self.optimizer,
                "communication": {"tp": self.tp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "pp": self.pp,
                                  "total": self.communication},
                "bubble": self.bubble}


def _link(hardware: Hardware, layout: Layout, stride: int, size: int) -> tuple[float, float]:
    """(bytes/s, seconds of latency) of a group of `size` ranks `stride` apart."""
    if stride * size <= layout.nproc_per_node:
        return hardware.intra_node_bandwidth_gbps * 1e9, hardware.intra_node_latency_us * 1e-6
    return hardware.inter_node_bandwidth_gbps * 1e9, hardware.inter_node_latency_us * 1e-6


def bus_factor(kind: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: the share of the bytes each rank's link carries in a ring algorithm."""
    if kind == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    return 1.0  # broadcast, send / recv


def collective_seconds(kind: str, nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    if kind == "send":
        return nbytes / bandwidth + latency
    steps = ranks - 1
    return bus_factor(kind, ranks) * nbytes / bandwidth + (2 if kind == "all_reduce" else 1) * steps * latency


def _layer_matmul_flops(model: Any, layer: int, tokens: float, layout: Layout) -> float:
    """Forward + backward matmul FLOPs of one layer on one rank (2 x 3 per multiply-add and token)."""
    attn_split, _ = attention_parameters(model)
    h = model.hidden_size
    ffn_split, _, experts = ffn_parameters(model, layer)
    flops = 6 * tokens * attn_split / layout.tp
    if model.mla.enabled:  # the replicated down projections run on every tp rank
        mla = model.mla
        flops += 6 * tokens * h * ((mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim)
    flops += 6 * tokens * ffn_split / layout.tp
    if experts:
        moe = model.moe
        flops += 6 * tokens * h * moe.num_experts  # router
        flops += 6 * tokens * moe.top_k * model_math.SWIGLU_MATRICES * h * moe.ffn_hidden_size / layout.etp
    return flops


def _attention_flops(model: Any, tokens: float, seq: int, layout: Layout) -> float:
    """Forward + backward score and context FLOPs of one layer on one rank; causal masking halves them."""
    heads = model.num_attention_heads / layout.tp
    width = model_math.query_key_head_dim(model) + model_math.value_head_dim(model)
    return 6 * tokens * seq * heads * width * 0.5


def step_time(model: Any, layout: Layout, seq: int, stage: StageMemory, layer_ids: list[int],
              hardware: Hardware) -> StepTime:
    peak = hardware.peak_tflops * 1e12
    tokens = layout.micro_batch * seq / layout.cp
    act = activation_bytes(layout)
    matmul = attention = elementwise = recompute_matmul = recompute_attention = 0.0
    for layer in layer_ids:
        layer_matmul = _layer_matmul_flops(model, layer, tokens, layout)
        layer_attention = _attention_flops(model, tokens, seq, layout)
        matmul += layer_matmul
        attention += layer_attention
        if layout.recompute in ("full", "selective"):  # the forward pass again (a third of forward + backward)
            recompute_attention += layer_attention / 3
            recompute_matmul += layer_matmul / 3 if layout.recompute == "full" else 0.0
        stored = (activations.native_layer(model, layer, tokens=tokens, tp=layout.tp, act_bytes=act)
                  if layout.traits.native_activations else
                  activations.megatron_layer(model, layer, tokens=tokens, seq=seq, tp=layout.tp,
                                             sp=layout.sequence_parallel, recompute="none",
                                             flash=layout.flash_attention, act_bytes=act, etp=layout.etp))
        elementwise += 3 * stored
    if stage.stage == layout.pp - 1:  # the output layer and the loss
        vocab_flops = 6 * tokens * model.hidden_size * model.vocab_size / layout.tp
        matmul += vocab_flops
        elementwise += 3 * tokens * model.vocab_size * 4 / layout.tp
    matmul_time = (matmul + recompute_matmul) / (peak * hardware.matmul_efficiency)
    attention_time = (attention + recompute_attention) / (peak * hardware.attention_efficiency)
    micro_batch = matmul_time + attention_time + elementwise / (hardware.memory_bandwidth_gbps * 1e9)
    m = layout.grad_accum
    ops = step_host_ops(model, layer_ids, m, tp=layout.tp, fsdp=layout.fsdp, first=stage.stage == 0,
                        last=stage.stage == layout.pp - 1)
    host = (ops.plain * hardware.op_overhead_us + ops.dtensor * hardware.dtensor_op_overhead_us) * 1e-6
    hides = hardware.overlaps_communication
    h_bytes = tokens * model.hidden_size * act

    # tensor parallel: two collectives forward and two backward per layer (all-reduce, or all-gather +
    # reduce-scatter with sequence parallelism: the same bytes); full recompute repeats the forward ones
    tp_bw, tp_lat = _link(hardware, layout, 1, layout.tp)
    tp_count = 4 + (2 if layout.recompute == "full" else 0)
    tp = len(layer_ids) * tp_count * collective_seconds("all_reduce", h_bytes, layout.tp, tp_bw, tp_lat) * m

    # context parallel: the ring passes each rank's k and v chunk cp - 1 times forward, twice that backward
    cp_bw, cp_lat = _link(hardware, layout, layout.tp, layout.cp)
    kv_bytes = tokens * (activations.widths(model).k + activations.widths(model).v) / layout.tp * act
    cp_comm = len(layer_ids) * 3 * (layout.cp - 1) * (kv_bytes / cp_bw + cp_lat) if layout.cp > 1 else 0.0
    cp = (max(0.0, cp_comm - attention_time) if hides else cp_comm) * m

    # expert parallel: dispatch and combine, forward and backward, per MoE layer
    ep_bw, ep_lat = _link(hardware, layout, layout.etp, layout.ep)
    moe_layers = sum(1 for layer in layer_ids if model_math.is_moe_layer(model, layer))
    ep = moe_layers * 4 * collective_seconds("all_to_all", h_bytes * model.moe.top_k, layout.ep, ep_bw, ep_lat) * m

    # data parallel (dp x cp ranks hold the same dense weights)
    dp_ranks = layout.dp * layout.cp
    dp_bw, dp_lat = _link(hardware, layout, layout.tp, dp_ranks)
    params = stage.parameters
    bf16 = layout.precision != "fp32"
    grad_bytes = 2 if bf16 and layout.traits.bf16_gradient_reduction else 4
    param_bytes = 2 if bf16 and layout.traits.bf16_parameter_gathers else 4
    micro_batch_backward = micro_batch * 2 / 3 if hides else 0.0
    micro_batch_hiding = micro_batch if hides else 0.0
    if layout.fsdp:  # per micro-batch: gather for forward and backward, reduce-scatter the gradients
        per_mb = (2 * collective_seconds("all_gather", params.total * param_bytes, dp_ranks, dp_bw, dp_lat)
                  + collective_seconds("reduce_scatter", params.total * grad_bytes, dp_ranks, dp_bw, dp_lat))
        dp = max(0.0, per_mb - micro_batch_hiding) * m
    elif layout.distributed_optimizer:
        reduce = collective_seconds("reduce_scatter", params.total * grad_bytes, dp_ranks, dp_bw, dp_lat)
        gather = collective_seconds("all_gather", params.total * param_bytes, dp_ranks, dp_bw, dp_lat)
        dp = max(0.0, reduce - micro_batch_backward) + max(0.0, gather - micro_batch_hiding / 3)
    else:
        reduce = collective_seconds("all_reduce", params.total * grad_bytes, dp_ranks, dp_bw, dp_lat)
        dp = max(0.0, reduce - micro_batch_backward)

    # pipeline: activations to the next stage and gradients back, on the critical path
    pp_bw, pp_lat = _link(hardware, layout, layout.tp * layout.cp * layout.dp, layout.pp)
    p2p_bytes = h_bytes / (layout.tp if layout.sequence_parallel else 1)
    pp = 2 * (m + layout.pp - 1) * collective_seconds("send", p2p_bytes, layout.pp, pp_bw, pp_lat) if layout.pp > 1 else 0.0

    per_micro_batch_total = micro_batch + (tp + ep + cp) / m
    bubble = (layout.pp - 1) / layout.vpp * per_micro_batch_total if layout.pp > 1 else 0.0
    held = params.dense / (dp_ranks if layout.fsdp or layout.distributed_optimizer else 1) + params.expert
    optimizer = held * 28 / (hardware.memory_bandwidth_gbps * 1e9)
    return StepTime(compute=micro_batch * m + host, optimizer=optimizer, tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, bubble=bubble,
                    recompute_flops=(recompute_matmul + 2 * recompute_attention) * m)  # attention unhalved, as in MFU
