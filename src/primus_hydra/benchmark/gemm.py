"""GEMM throughput: C = A @ B for (M, K) x (K, N) at a dtype; 2 M N K FLOPs per product."""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from primus_hydra.benchmark.dtypes import DTYPES
from primus_hydra.benchmark.timing import median_seconds, synchronize

PROBE_SIZE = 256  # large enough for every fast CPU path (oneDNN's bf16 kernels start below it)
PROBE_CALLS = 8  # the fastest of these counts: a loaded machine or a thread pool starting only slows some down
FAST_KERNEL_FRACTION = 0.25  # of fp32's throughput at PROBE_SIZE: below it a dtype has no fast kernel here


def product(m: int, n: int, k: int, dtype_name: str, device: torch.device) -> Callable[[], torch.Tensor]:
    """A function computing one (M, K) x (K, N) product on operands drawn once."""
    dtype = DTYPES[dtype_name]
    if dtype_name == "fp8":
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(n, k, device=device).to(dtype).t()
        scale = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return lambda: a @ b


def measure(m: int, n: int, k: int, dtype_name: str, device: torch.device, *, warmup: int, iters: int,
            peak_tflops: Optional[float], label: str = "square", tick: Optional[Callable[[], None]] = None) -> dict:
    seconds = median_seconds(product(m, n, k, dtype_name, device), device, warmup=warmup, iters=iters, tick=tick)
    tflops = 2 * m * n * k / seconds / 1e12
    return {"shape": label, "m": m, "n": n, "k": k, "dtype": str(DTYPES[dtype_name]), "time_s": seconds,
            "tflops": tflops, "peak_fraction": tflops / peak_tflops if peak_tflops else None}


def best_tflops(dtype_name: str, device: torch.device, size: int = PROBE_SIZE, calls: int = PROBE_CALLS) -> float:
    run = product(size, size, size, dtype_name, device)
    fastest = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        run()
        synchronize(device)
        fastest = min(fastest, time.perf_counter() - start)
    return 2 * size ** 3 / fastest / 1e12


def fast_kernel_dtypes(candidates: list[str], device: torch.device) -> tuple[list[str], list[str]]:
    """The candidates this device multiplies at least FAST_KERNEL_FRACTION as fast as fp32 (the fastest of
    PROBE_CALLS PROBE_SIZE^3 products), and one line for each one left out (a CPU without fp16 kernels runs fp16 at
    1-2 % of fp32). On the CPU with one thread: a kernel's speed per core, which a loaded machine cannot distort
    (with two threads on two busy cores, fp32 products wait for a descheduled thread and drop to fp16's speed)."""
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        rates = {dtype: best_tflops(dtype, device) for dtype in candidates}
    finally:
        torch.set_num_threads(threads)
    reference = rates.get("fp32") or max(rates.values())
    kept, skipped = [], []
    for dtype, rate in rates.items():
        if rate >= FAST_KERNEL_FRACTION * reference:
            kept.append(dtype)
        else:
            skipped.append(f"{dtype} skipped: {1e3 * rate:.3g} GFLOP/s at {PROBE_SIZE}^3 against fp32's "
                           f"{1e3 * reference:.3g} (no fast {dtype} kernel on this {device.type}); "
                           f"task.dtypes=[{dtype}] measures it anyway")
    return kept, skipped
