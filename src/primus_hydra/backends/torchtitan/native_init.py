"""torchtitan's llama3 and qwen3 initialised with backend=torch's weights for the same seed, shard by shard.

Parameter names are the native model's (tok_embeddings, layers.<i>.attention.wq, .q_norm, feed_forward.w1, norm,
output), once torchtitan's wrappers are looked through (activation checkpointing, torch.compile). One difference, in
llama3 only: it rotates query/key pairs (2i, 2i+1) (Meta's complex form), backend=torch and qwen3 pairs (i, i + d/2)
(rotate-half), so within each head the rows of llama3's wq and wk are interleaved: its row 2i is native row i, row
2i+1 native row i + d/2. The scores are the same. Each rank draws only the rows of the heads its shard (FSDP's or
TP's) covers.
"""
from __future__ import annotations

from typing import Any

import torch

from primus_hydra.backends.torch.weights import NativeDraws, shard_bounds

_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def native_name(name: str) -> str:
    for wrapper in _WRAPPERS:
        name = name.replace(wrapper, "")
    return name


def interleave_rotary_rows(rows: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Rows of whole heads, rotate-half order -> torchtitan's pairwise order (the inverse: deinterleave)."""
    heads = rows.shape[0] // head_dim
    return rows.reshape(heads, 2, head_dim // 2, -1).transpose(1, 2).reshape(rows.shape)


def deinterleave_rotary_rows(rows: torch.Tensor, head_dim: int) -> torch.Tensor:
    heads = rows.shape[0] // head_dim
    return rows.reshape(heads, head_dim // 2, 2, -1).transpose(1, 2).reshape(rows.shape)


def pairwise_rotary(model_cfg: Any) -> bool:
    """torchtitan's llama3 rotates (2i, 2i+1) pairs; its qwen3 rotates halves, as backend=torch does."""
    return model_cfg.family == "llama"


@torch.no_grad()
def init_like_native(model_parts: list, model_cfg: Any, seed: int) -> None:
    draws, pairwise = NativeDraws(model_cfg, seed), pairwise_rotary(model_cfg)
    for part in model_parts:
        for name, param in part.named_parameters():
            local, _, offset = shard_bounds(param)
            if local.numel():
                local.copy_(_native_values(native_name(name), tuple(param.shape), tuple(local.shape), offset, draws,
                                           pairwise))


def _native_values(name: str, full: tuple, shape: tuple, offset: tuple, draws: NativeDraws,
                   pairwise: bool) -> torch.Tensor:
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    std = draws.residual_std if name.endswith(("wo.weight", "w2.weight")) else draws.std
    rows = (offset[0], offset[0] + shape[0])
    cols = (offset[1], offset[1] + shape[1]) if len(full) == 2 else None
    if not pairwise or not name.endswith(("attention.wq.weight", "attention.wk.weight")):
        return draws.block(name, full, rows, cols, std)
    d = draws.head_dim
    first, last = rows[0] // d * d, -(-rows[1] // d) * d  # the whole heads the shard's rows fall in
    heads = interleave_rotary_rows(draws.block(name, full, (first, last), cols, std), d)
    return heads[rows[0] - first: rows[1] - first]
