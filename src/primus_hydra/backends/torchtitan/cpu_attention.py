"""Flex attention on the CPU, where torch's flex_attention has no backward ("FlexAttention does not support backward
on CPU") and torchtitan compiles it and its block masks with inductor: the same attention written out in eager ops.

The block mask's own mask_mod gives the dense mask (torch's create_mask), so causal, document and sliding-window
masks are exactly what the GPU kernel applies; the scores, their log-sum-exp and the output are computed in float32.
A score_mod is not supported (torchtitan's models pass none).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.nn.attention.flex_attention import BlockMask, create_mask


def eager_flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, score_mod=None,
                         block_mask: Optional[BlockMask] = None, scale: Optional[float] = None,
                         return_lse: bool = False, enable_gqa: bool = False, **_unused):
    """flex_attention's result for query [B, Hq, L, E], key [B, Hkv, S, E], value [B, Hkv, S, Ev]: the output
    [B, Hq, L, Ev] in the query's dtype and, with return_lse, the natural-log log-sum-exp of each query's scores
    [B, Hq, L] in float32 (what flex returns)."""
    if score_mod is not None:
        raise NotImplementedError("the CPU flex attention (torchtitan.cpu.flex_attention) takes no score_mod")
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads != kv_heads:
        if not enable_gqa or heads % kv_heads:
            raise ValueError(f"{heads} query heads and {kv_heads} key/value heads need enable_gqa and a multiple")
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(query.float(), key.float().transpose(-2, -1)) * scale
    if block_mask is not None:
        mask_batch = block_mask.kv_num_blocks.shape[0]
        allowed = create_mask(block_mask.mask_mod, mask_batch, 1, query.shape[-2], key.shape[-2], device=query.device)
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse.unsqueeze(-1)).nan_to_num(0.0)  # a row with no allowed key attends to nothing
    output = torch.matmul(weights, value.float()).to(query.dtype)
    return (output, lse) if return_lse else output
