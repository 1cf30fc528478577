"""Activation bytes one rank stores for one micro-batch of one layer, per backend and recompute setting.

Two accountings, each a list of the tensors autograd keeps (per token, in elements), then times their bytes:

- `megatron_layer` (megatron, megatron_bridge, torchtitan): Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", section 4, generalised from GPT (MHA, 4h GeLU MLP, dropout) to the
  model's own widths: two norm inputs, the QKV and FC1 inputs (h each; replicated over tp unless sequence
  parallel), q, k, v and the attention output (split over tp), the FC1 output (gate and up, 2f) and the SwiGLU
  output (f), the softmax scores (heads x seq per token) unless flash attention. No dropout masks (Llama-style
  presets train without dropout). With GPT's widths this is Korthikanti's 34 sbh + 5 a s^2 b minus the
  4 sbh of dropout masks. selective recomputes the core attention (drops the scores); full keeps only each
  layer's input (2 sbh) plus one layer's working set during its backward.
- `native_layer` (backend=torch): what autograd saves running backends/torch/model.py eagerly: the residual
  input, each RMSNorm's normalised value and output (6 h with the second residual), q/k after rotary, v, the
  SDPA output and its flattened copy (3 q + 2 kv), and the SwiGLU's w1 and w3 outputs, silu and product (4 f);
  MoE: per routed token its gathered input, the expert's four f-wide tensors and the output before weighting.
  Measured on this CPU to within a few per cent (docs/projection.md, "Calibration").
"""
from __future__ import annotations

from typing import Any

from primus_hydra.config import model_math
from primus_hydra.config.attention_math import attention_head_dim
from primus_hydra.util.records import record


@record(frozen=True)
class Widths:
    h: int
    q: int  # query width (heads x qk head dim)
    k: int  # key width
    v: int  # value width (GQA: the kv heads')
    out: int  # attention-output width: heads x value head dim
    heads: int
    q_lora: int  # MLA latent widths (0 without MLA)
    kv_lora: int


def widths(model: Any) -> Widths:
    heads = model.num_attention_heads
    if model.mla.enabled:
        qk = model_math.query_key_head_dim(model)
        v = heads * model.mla.v_head_dim
        return Widths(model.hidden_size, heads * qk, heads * qk, v, v, heads,
                      model.mla.q_lora_rank or 0, model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
    hd = attention_head_dim(model)
    return Widths(model.hidden_size, heads * hd, model.num_kv_heads * hd, model.num_kv_heads * hd, heads * hd, heads, 0, 0)


def megatron_layer(model: Any, layer: int, *, tokens: float, seq: int, tp: int, sp: bool, recompute: str,
                   flash: bool, act_bytes: int, etp: int) -> float:
    """Bytes of one layer for `tokens` tokens of one rank's micro-batch (its cp chunk)."""
    w = widths(model)
    rep_div = tp if sp else 1  # what is replicated over tp without sequence parallelism
    if recompute == "full":
        return tokens * w.h * act_bytes / rep_div
    replicated = 4 * w.h  # two norm inputs, the QKV input, the FC1 (or router) input
    replicated += 2 * (w.q_lora + w.kv_lora)  # MLA: the latents and their normalised copies (replicated down projections)
    split = w.q + w.k + w.v  # q, k, v as attention reads them
    split += w.out  # attention output (flash: the same tensor the output projection reads)
    scores = 0.0
    if not flash and recompute != "selective":
        scores = w.heads * seq  # the softmax output, which the product with v keeps (Korthikanti's 2 a s^2 b)
    elements = replicated / rep_div + (split + scores) / tp
    if model_math.is_moe_layer(model, layer):
        moe = model.moe
        f_e, f_s = moe.ffn_hidden_size, model_math.shared_expert_ffn_hidden_size(model)
        routed = moe.top_k * (2 * w.h + 3 * f_e / etp)  # permuted input, FC1 (2 f), act (f), output before combine
        router = moe.num_experts * 4 / act_bytes  # fp32 logits
        elements += routed + router / rep_div + 3 * f_s / tp
    else:
        elements += 3 * model.ffn_hidden_size / tp
    return tokens * elements * act_bytes


def native_layer(model: Any, layer: int, *, tokens: float, tp: int, act_bytes: int) -> float:
    """Bytes of one layer of backend=torch (eager autograd, no recompute)."""
    w = widths(model)
    elements = 6 * w.h  # residual input, two RMSNorm (normalised, output) pairs, second residual
    if model.mla.enabled:
        elements += 3 * (w.q_lora + w.kv_lora) + (2 * w.q + w.v + 2 * w.out) / tp
    else:
        elements += (w.q + w.k + w.v + 2 * w.out) / tp  # q, k after rotary, v, the output and its flat copy
    if model_math.is_moe_layer(model, layer):
        moe = model.moe
        elements += 3 * moe.num_experts  # router logits, scores and their selection
        elements += moe.top_k * (2 * w.h + 4 * moe.ffn_hidden_size)
        elements += 4 * model_math.shared_expert_ffn_hidden_size(model)
    else:
        elements += 4 * model.ffn_hidden_size / tp
    return tokens * elements * act_bytes


def output_layer(model: Any, *, tokens: float, tp: int, sp: bool, native: bool, act_bytes: int,
                 padded_vocab: int) -> float:
    """The last stage's final norm, output layer and loss for one micro-batch (native: the native model's)."""
    h = model.hidden_size
    if native:  # final norm (3 h), logits (gathered to the full vocabulary under tp) and log-softmax
        return tokens * (3 * h * act_bytes + padded_vocab * (act_bytes * (1 + 1 / tp) + 4))
    rep_div = tp if sp else 1
    return tokens * (2 * h * act_bytes / rep_div + 4 * padded_vocab / tp)  # norm in/out; fp32 vocab-parallel logits


def pipeline_in_flight(layout: Any, stage: int) -> float:
    """Micro-batches whose activations stage `stage` holds at once.

    1F1B: pp - stage (at most the micro-batches of a step); GPipe: every micro-batch; interleaved (vpp > 1):
    Megatron's penalty pp x (1 + (pp - 1) / (pp x vpp)) on the first stage, over the pp stages of a chunk."""
    m, pp = layout.grad_accum, layout.pp
    if pp == 1:
        return 1.0
    if layout.schedule == "gpipe":
        return float(m)
    if layout.vpp > 1:
        return (pp - stage) * (1 + (pp - 1) / (pp * layout.vpp))
    return float(min(m, pp - stage))
