"""GEMM throughput: C = A @ B for (M, K) x (K, N) at a dtype; 2 M N K FLOPs per product."""
from __future__ import annotations

from typing import Any, Optional

import torch

from primus_hydra.benchmark.dtypes import DTYPES
from primus_hydra.benchmark.timing import median_seconds


def model_shapes(model: Any, tokens: int, tp: int) -> list[tuple[str, int, int, int]]:
    """(layer, M, N, K) of the configured model's matmuls for `tokens` tokens on one tp rank: QKV (column split),
    attention output (row split), FFN up (gate and up, column split), FFN down (row split), the output layer."""
    from primus_hydra.config.model_math import attention_head_dim

    h = model.hidden_size
    hd = attention_head_dim(model)
    q, kv = model.num_attention_heads * hd, model.num_kv_heads * hd
    f = model.ffn_hidden_size
    return [("qkv", tokens, (q + 2 * kv) // tp, h), ("attention_out", tokens, h, q // tp),
            ("ffn_up", tokens, 2 * f // tp, h), ("ffn_down", tokens, h, f // tp),
            ("output", tokens, model.vocab_size // tp, h)]


def measure(m: int, n: int, k: int, dtype_name: str, device: torch.device, *, warmup: int, iters: int,
            peak_tflops: Optional[float], label: str = "square") -> dict:
    dtype = DTYPES[dtype_name]
    if dtype_name == "fp8":
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(n, k, device=device).to(dtype).t()
        scale = torch.ones((), device=device)

        def run():
            return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    else:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)

        def run():
            return a @ b
    seconds = median_seconds(run, device, warmup=warmup, iters=iters)
    tflops = 2 * m * n * k / seconds / 1e12
    return {"shape": label, "m": m, "n": n, "k": k, "dtype": str(dtype), "time_s": seconds, "tflops": tflops,
            "peak_fraction": tflops / peak_tflops if peak_tflops else None}
