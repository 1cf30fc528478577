"""Random weights drawn on each rank for its own shard only, identical whatever the parallel layout.

A parameter's values are a function of (seed, its name, the position in it), not of the layout: the rows of its
2-D view [dim 0, the rest] are drawn in fixed blocks, each from a generator seeded by (seed, name, block). A rank
draws the blocks that cover its shard (a DTensor's rows and columns in the full tensor; a plain tensor is all of
it) and keeps its part: no rank ever holds a full copy, and one process, DDP, FSDP2, TP and PP start from the same
weights bitwise (per device type: CPU and CUDA generators differ).
"""
from __future__ import annotations

import hashlib
import math
import sys
from typing import Any

import torch

BLOCK_ELEMENTS = 1 << 20  # values drawn per generator: bounds the memory a rank needs beyond its shard


def block_seed(seed: int, name: str, block: int) -> int:
    digest = hashlib.blake2b(f"{seed}/{name}/{block}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def shard_bounds(param: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], tuple[int, ...]]:
    """(this rank's local tensor, its shape, its offset in the full tensor): the whole of a plain tensor."""
    dtensor_type = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", ())
    if isinstance(param, dtensor_type):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
        return param.to_local(), tuple(shape), tuple(offset)
    return param, tuple(param.shape), (0,) * param.dim()


@torch.no_grad()
def normal_(param: torch.Tensor, std: float, seed: int, name: str) -> None:
    """Fill this rank's shard of `param` with N(0, std) values that depend only on (seed, name, position)."""
    local, shape, offset = shard_bounds(param)
    fill_normal_shard(local, tuple(param.shape), offset, std, seed, name)


def fill_normal_shard(local: torch.Tensor, full_shape: tuple[int, ...], offset: tuple[int, ...], std: float,
                      seed: int, name: str) -> None:
    """`local` holds the block of a `full_shape` tensor that starts at `offset`: fill it with its N(0, std) values."""
    if local.numel() == 0:
        return
    rank = len(full_shape)
    if rank > 2 and any(offset[1:]):
        raise NotImplementedError(f"{name}: a shard of a {rank}-D parameter split beyond dim 0")
    row_width = math.prod(full_shape[1:]) if rank > 1 else 1
    columns = (offset[1], offset[1] + local.shape[1]) if rank == 2 else (0, row_width)
    target = local.view(local.shape[0], -1)
    first, last = offset[0], offset[0] + local.shape[0]  # rows of the full tensor held here
    rows_per_block = max(1, BLOCK_ELEMENTS // row_width)
    for block in range(first // rows_per_block, math.ceil(last / rows_per_block)):
        start = block * rows_per_block
        generator = torch.Generator(device=local.device).manual_seed(block_seed(seed, name, block))
        values = torch.randn(min(rows_per_block, full_shape[0] - start), row_width, generator=generator,
                             device=local.device, dtype=torch.float32)
        low, high = max(first, start), min(last, start + rows_per_block)
        target[low - first: high - first].copy_(values[low - start: high - start, columns[0]: columns[1]].mul_(std))


class NativeDraws:
    """Rows and columns of the native model's parameters, drawn as backend=torch draws them."""

    def __init__(self, model: Any, seed: int) -> None:
        self.model, self.seed = model, seed
        self.std = model.init_std
        self.residual_std = model.init_std / (2 * model.num_layers) ** 0.5
        self.head_dim = model.head_dim or model.hidden_size // model.num_attention_heads

    def block(self, name: str, full_shape: tuple[int, ...], rows: tuple[int, int], cols: tuple[int, int] | None = None,
              std: float | None = None) -> torch.Tensor:
        """Rows [r0, r1) (and columns [c0, c1) of a 2-D parameter) of native parameter `name`."""
        std = self.std if std is None else std
        width = full_shape[1] if len(full_shape) == 2 else 1
        c0, c1 = cols or (0, width)
        if len(full_shape) == 2:
            out = torch.empty(rows[1] - rows[0], c1 - c0)
            fill_normal_shard(out, full_shape, (rows[0], c0), std, self.seed, name)
        else:
            out = torch.empty(rows[1] - rows[0], *full_shape[1:])
            fill_normal_shard(out, full_shape, (rows[0],) + (0,) * (len(full_shape) - 1), std, self.seed, name)
        return out
