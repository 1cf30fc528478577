"""torchtitan's llama3, qwen3 and deepseek_v3 initialised with backend=torch's weights for the same seed, shard by
shard, and the two models' names and row orders (convert.py uses the same maps for checkpoints). gpt_oss, which the
native model does not build, gets the same rule by its own names (biases zero, the sinks drawn as a weight), so its
weights too are the same whatever the layout.

Names: torchtitan's are the native model's (tok_embeddings, layers.<i>.attention.wq, .q_norm, .wkv_a,
feed_forward.w1, norm, output) once its wrappers are looked through (activation checkpointing, torch.compile), except
for MoE layers: torchtitan's `moe.experts.w1`, `moe.router.gate`, `moe.shared_experts`, `moe.expert_bias` are the
native `feed_forward.w1`, `feed_forward.router`, `feed_forward.shared`, `feed_forward.expert_bias`.

Rows: llama3 and deepseek_v3 rotate query/key pairs (2i, 2i+1) (Meta's and DeepSeek's complex form), backend=torch
and qwen3 pairs (i, i + d/2) (rotate-half). So the rotary rows are interleaved: in llama3 every row of each wq/wk
head; in deepseek_v3 the last qk_rope_head_dim rows of each wq (wq_b) head and of wkv_a. Row 2i of such a block is
native row i, row 2i+1 native row i + d/2; the scores are the same. Each rank draws only the whole units (heads,
or wkv_a) that its shard (FSDP's or TP's) covers.
"""
from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional

import torch

from primus_hydra.backends.common.weights import NativeDraws, shard_bounds

# torchtitan models whose query/key rows are in rotate-half order, as the native model's
ROTATE_HALF_FAMILIES = ("qwen3", "gpt_oss")
_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")
# torchtitan name pattern, native name pattern (MoE layers; a dense layer's feed_forward.w1.weight is the same in both)
_MOE_NAMES = ((r"\.moe\.experts\.(w[123])$", r".feed_forward.\1"), (r"\.moe\.router\.gate\.", ".feed_forward.router."),
              (r"\.moe\.shared_experts\.", ".feed_forward.shared."), (r"\.moe\.expert_bias$", ".feed_forward.expert_bias"))
_NATIVE_MOE_NAMES = ((r"\.feed_forward\.(w[123])$", r".moe.experts.\1"), (r"\.feed_forward\.router\.", ".moe.router.gate."),
                     (r"\.feed_forward\.shared\.", ".moe.shared_experts."), (r"\.feed_forward\.expert_bias$", ".moe.expert_bias"))


class RotaryRows(NamedTuple):
    """Where a weight's rotary rows are: in each unit of `unit` rows, `size` rows from `start`."""
    unit: int
    start: int
    size: int


def native_name(name: str) -> str:
    for wrapper in _WRAPPERS:
        name = name.replace(wrapper, "")
    for pattern, native in _MOE_NAMES:
        name = re.sub(pattern, native, name)
    return name


def torchtitan_name(name: str) -> str:
    for pattern, titan in _NATIVE_MOE_NAMES:
        name = re.sub(pattern, titan, name)
    return name


def rotary_rows(name: str, model_cfg: Any) -> Optional[RotaryRows]:
    """The rotary rows of native weight `name` that torchtitan orders pairwise; None: the same order."""
    if model_cfg.family in ROTATE_HALF_FAMILIES:
        return None
    if model_cfg.mla.enabled:
        mla = model_cfg.mla
        if name.endswith(("attention.wq.weight", "attention.wq_b.weight")):
            unit = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            return RotaryRows(unit, mla.qk_nope_head_dim, mla.qk_rope_head_dim)
        if name.endswith("attention.wkv_a.weight"):
            return RotaryRows(mla.kv_lora_rank + mla.qk_rope_head_dim, mla.kv_lora_rank, mla.qk_rope_head_dim)
        return None
    if name.endswith(("attention.wq.weight", "attention.wk.weight")):
        head_dim = model_cfg.head_dim or model_cfg.hidden_size // model_cfg.num_attention_heads
        return RotaryRows(head_dim, 0, head_dim)
    return None


def interleave_rotary_rows(rows: torch.Tensor, where: RotaryRows) -> torch.Tensor:
    """Rows of whole units, rotate-half order -> torchtitan's pairwise order."""
    return _reorder_rows(rows, where, (2, where.size // 2))


def deinterleave_rotary_rows(rows: torch.Tensor, where: RotaryRows) -> torch.Tensor:
    return _reorder_rows(rows, where, (where.size // 2, 2))


def _reorder_rows(rows: torch.Tensor, where: RotaryRows, split: tuple[int, int]) -> torch.Tensor:
    units = rows.reshape(rows.shape[0] // where.unit, where.unit, -1).clone()
    rotary = units[:, where.start: where.start + where.size]
    units[:, where.start: where.start + where.size] = rotary.reshape(-1, *split, rotary.shape[-1]).transpose(1, 2) \
        .reshape(rotary.shape)
    return units.reshape(rows.shape)


@torch.no_grad()
def init_like_native(model_parts: list, model_cfg: Any, seed: int) -> None:
    draws = NativeDraws(model_cfg, seed)
    for part in model_parts:
        for name, param in part.named_parameters():
            local, _, offset = shard_bounds(param)
            if local.numel():
                native = native_name(name)
                local.copy_(_native_values(native, tuple(param.shape), tuple(local.shape), offset, draws,
                                           rotary_rows(native, model_cfg)))


def _native_values(name: str, full: tuple, shape: tuple, offset: tuple, draws: NativeDraws,
                   rotary: Optional[RotaryRows]) -> torch.Tensor:
    """backend=torch's init (model.py Transformer.init_weights) for these rows of parameter `name`."""
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    if name.endswith(("expert_bias", ".bias")):
        return torch.zeros(shape)
    std = draws.residual_std if name.endswith(("wo.weight", "w2.weight", ".w2")) else draws.std
    rows = (offset[0], offset[0] + shape[0])
    cols = (offset[1], offset[1] + shape[1]) if len(full) == 2 else None
    if len(full) > 2:  # stacked experts: whole experts drawn, then the slice a tensor-parallel shard holds
        inner = tuple(slice(start, start + size) for start, size in zip(offset[1:], shape[1:]))
        return draws.block(name, full, rows, None, std)[(slice(None),) + inner]
    if rotary is None:
        return draws.block(name, full, rows, cols, std)
    unit = rotary.unit
    first, last = rows[0] // unit * unit, -(-rows[1] // unit) * unit  # the whole units the shard's rows fall in
    units = interleave_rotary_rows(draws.block(name, full, (first, last), cols, std), rotary)
    return units[rows[0] - first: rows[1] - first]
