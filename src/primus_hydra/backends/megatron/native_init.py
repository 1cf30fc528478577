"""megatron-core's GPTModel initialised with backend=torch's weights for the same seed, shard by shard.

The native backend draws every parameter as a function of (seed, its name, the position in it) (torch/weights.py),
N(0, init_std) with residual output projections at init_std / sqrt(2 * num_layers): the scheme Megatron's own
init_method / output_layer_init_method follow. Here each rank fills its own megatron-core shards with those very
values: a fused `linear_qkv` row block is the query, key and value rows of its query groups, SwiGLU's `linear_fc1`
is [gate; up], a row-parallel weight is a column block, an expert is a slice of the native (experts, ...) tensor.
So backend=megatron starts from backend=torch's weights for the same seed, every layout (tp, pp, ep, dp) starts
from the same weights, and no rank holds more than its shards.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import torch

from primus_hydra.backends.common.weights import NativeDraws
from primus_hydra.backends.megatron.sharded_weights import _SKIPPED, global_name

_EXPERT = re.compile(r"^decoder\.layers\.(\d+)\.mlp\.experts\.local_experts\.(\d+)\.(linear_fc1|linear_fc2)\.weight$")
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")


def _row_span(size: int, rank: int, parts: int) -> tuple[int, int]:
    share = size // parts
    return rank * share, (rank + 1) * share


@torch.no_grad()
def init_like_native(megatron_model: Any, model_cfg: Any, seed: int) -> None:
    """Fill every parameter of this rank's `megatron_model` with backend=torch's values for `seed`."""
    from megatron.core import parallel_state as ps

    draws = NativeDraws(model_cfg, seed)
    layer_numbers = {local: layer.layer_number - 1 for local, layer in enumerate(megatron_model.decoder.layers)}
    experts = next((m for m in megatron_model.modules() if hasattr(m, "local_experts")), None)
    first_expert = ps.get_expert_model_parallel_rank() * len(experts.local_experts) if experts is not None else 0
    tp = (ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size())
    etp = (ps.get_expert_tensor_parallel_rank(), ps.get_expert_tensor_parallel_world_size())
    for local_name, param in megatron_model.named_parameters():
        name = global_name(local_name, layer_numbers, first_expert)
        if name.endswith(_SKIPPED):
            continue
        values = _values_for(name, tuple(param.shape), draws, etp if ".experts." in name else tp)
        param.copy_(values.to(param.dtype))


def _values_for(name: str, shape: tuple[int, ...], draws: NativeDraws, tp: tuple[int, int]) -> torch.Tensor:
    if name.endswith(("layernorm.weight", "layer_norm_weight", "final_layernorm.weight")):
        return torch.ones(shape)
    if name.endswith(("bias", "expert_bias")):
        return torch.zeros(shape)
    m = draws.model
    if name in ("embedding.word_embeddings.weight", "output_layer.weight"):
        native = "tok_embeddings.weight" if name.startswith("embedding") else "output.weight"
        return _vocab_rows(draws, native, shape, tp)
    if name == "embedding.position_embeddings.weight":  # learned_absolute: no native twin; N(0, init_std) as
        return draws.block("pos_embeddings.weight", shape, (0, shape[0]))  # Megatron's init_method, every rank alike
    expert = _EXPERT.match(name)
    if expert:
        return _expert_values(draws, int(expert.group(1)), int(expert.group(2)), expert.group(3), shape, tp)
    layer = _LAYER.match(name)
    if not layer:
        raise ValueError(f"{name}: no native counterpart to initialise it from")
    i, rest = int(layer.group(1)), layer.group(2)
    native = f"layers.{i}."
    h = m.hidden_size
    fill: dict[str, Callable[[], torch.Tensor]] = {
        "self_attention.linear_qkv.weight": lambda: _qkv_rows(draws, native + "attention.", shape, tp),
        "self_attention.linear_proj.weight": lambda: draws.block(
            native + "attention.wo.weight", (h, m.num_attention_heads * draws.head_dim), (0, h),
            _row_span(m.num_attention_heads * draws.head_dim, *tp), draws.residual_std),
        "mlp.linear_fc1.weight": lambda: _glu_rows(draws, native + "feed_forward.", ".weight", m.ffn_hidden_size, tp),
        "mlp.linear_fc2.weight": lambda: draws.block(native + "feed_forward.w2.weight", (h, m.ffn_hidden_size), (0, h),
                                                     _row_span(m.ffn_hidden_size, *tp), draws.residual_std),
        "mlp.router.weight": lambda: draws.block(native + "feed_forward.router.weight", (m.moe.num_experts, h),
                                                 (0, m.moe.num_experts)),
        "mlp.shared_experts.linear_fc1.weight": lambda: _glu_rows(draws, native + "feed_forward.shared.", ".weight",
                                                                  shape[0] * tp[1] // 2, tp),
        "mlp.shared_experts.linear_fc2.weight": lambda: draws.block(
            native + "feed_forward.shared.w2.weight", (h, shape[1] * tp[1]), (0, h), _row_span(shape[1] * tp[1], *tp),
            draws.residual_std),
    }
    if rest not in fill:
        raise ValueError(f"{name}: no native counterpart to initialise it from")
    return fill[rest]()


def _vocab_rows(draws: NativeDraws, native: str, shape: tuple[int, ...], tp: tuple[int, int]) -> torch.Tensor:
    """This rank's rows of the padded vocabulary: the native rows, zeros for Megatron's padding."""
    vocab, hidden = draws.model.vocab_size, shape[1]
    start = tp[0] * shape[0]
    out = torch.zeros(shape)
    stop = min(start + shape[0], vocab)
    if stop > start:
        out[: stop - start] = draws.block(native, (vocab, hidden), (start, stop))
    return out


def _qkv_rows(draws: NativeDraws, prefix: str, shape: tuple[int, ...], tp: tuple[int, int]) -> torch.Tensor:
    """[q rows, k rows, v rows] of each query group this rank holds."""
    m, hd = draws.model, draws.head_dim
    groups, heads, h = m.num_kv_heads, m.num_attention_heads, m.hidden_size
    per_group = heads // groups
    pieces = []
    for g in range(*_row_span(groups, *tp)):
        pieces.append(draws.block(prefix + "wq.weight", (heads * hd, h), (g * per_group * hd, (g + 1) * per_group * hd)))
        pieces.append(draws.block(prefix + "wk.weight", (groups * hd, h), (g * hd, (g + 1) * hd)))
        pieces.append(draws.block(prefix + "wv.weight", (groups * hd, h), (g * hd, (g + 1) * hd)))
    out = torch.cat(pieces)
    if tuple(out.shape) != shape:
        raise ValueError(f"{prefix}linear_qkv: expected {shape}, the query groups give {tuple(out.shape)}")
    return out


def _glu_rows(draws: NativeDraws, prefix: str, suffix: str, ffn: int, tp: tuple[int, int]) -> torch.Tensor:
    """SwiGLU's fc1 shard: [this rank's gate (w1) rows; its up (w3) rows]."""
    h = draws.model.hidden_size
    rows = _row_span(ffn, *tp)
    return torch.cat([draws.block(prefix + "w1" + suffix, (ffn, h), rows),
                      draws.block(prefix + "w3" + suffix, (ffn, h), rows)])


def _expert_values(draws: NativeDraws, layer: int, expert: int, which: str, shape: tuple[int, ...],
                   tp: tuple[int, int]) -> torch.Tensor:
    """Expert `expert` of the native stacked (experts, ffn, hidden) / (experts, hidden, ffn) tensors."""
    m = draws.model
    e, f, h = m.moe.num_experts, m.moe.ffn_hidden_size, m.hidden_size
    prefix = f"layers.{layer}.feed_forward."
    rows = _row_span(f, *tp)
    if which == "linear_fc1":
        gate = draws.block(prefix + "w1", (e, f, h), (expert, expert + 1))[0]
        up = draws.block(prefix + "w3", (e, f, h), (expert, expert + 1))[0]
        return torch.cat([gate[rows[0]: rows[1]], up[rows[0]: rows[1]]])
    down = draws.block(prefix + "w2", (e, h, f), (expert, expert + 1), std=draws.residual_std)[0]
    return down[:, rows[0]: rows[1]]
