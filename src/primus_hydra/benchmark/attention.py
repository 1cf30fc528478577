"""Attention throughput: torch's scaled_dot_product_attention through each SDPA backend the device has, forward
and backward, at the configured model's shapes (heads and kv heads per tp rank, head dim, sequence).

FLOPs (causal: half the score matrix): forward 4 b heads s^2 d / 2; backward 2.5 x forward (FlashAttention's
count: the two products again, twice for the gradients, and the recomputed scores)."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from primus_hydra.benchmark.cases import AttentionCase
from primus_hydra.benchmark.dtypes import DTYPES
from primus_hydra.benchmark.timing import median_seconds

BACKWARD_FACTOR = 2.5


def sdpa_backends() -> dict[str, Any]:
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def measure(case: AttentionCase, device: torch.device, *, warmup: int, iters: int, peak_tflops: Optional[float],
            tick: Optional[Callable[[], None]] = None) -> list[dict]:
    """One record per SDPA backend that runs these shapes on this device (the others are skipped, named)."""
    from torch.nn.attention import sdpa_kernel

    batch, heads, kv_heads, head_dim, seq = case.batch, case.heads, case.kv_heads, case.head_dim, case.seq
    dtype = DTYPES[case.dtype]
    q = torch.randn(batch, heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(batch, kv_heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn(batch, heads, seq, head_dim, device=device, dtype=dtype)
    forward_flops = 4 * batch * heads * seq * seq * head_dim / 2
    records = []
    for name, backend in sdpa_backends().items():
        def forward(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv_heads)

        def forward_backward():
            out = forward()
            torch.autograd.backward(out, grad)

        try:
            forward()
        except RuntimeError as error:  # this backend has no kernel for these shapes or this device
            records.append({"backend": name, "available": False, "reason": str(error).splitlines()[0][:160]})
            continue
        fwd = median_seconds(lambda: forward().detach(), device, warmup=warmup, iters=iters, tick=tick)
        both = median_seconds(forward_backward, device, warmup=warmup, iters=iters, tick=tick)
        bwd = max(both - fwd, 1e-12)
        record = {"backend": name, "available": True, "batch": batch, "heads": heads, "kv_heads": kv_heads,
                  "head_dim": head_dim, "seq": seq, "dtype": str(dtype), "forward_s": fwd, "backward_s": bwd,
                  "forward_tflops": forward_flops / fwd / 1e12,
                  "backward_tflops": BACKWARD_FACTOR * forward_flops / bwd / 1e12}
        record["peak_fraction"] = record["forward_tflops"] / peak_tflops if peak_tflops else None
        records.append(record)
    return records
