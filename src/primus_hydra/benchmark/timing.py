"""Wall time of a repeated operation on a device: warm-up, then the median of timed iterations."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], device: torch.device, *, warmup: int, iters: int) -> float:
    """The median of `iters` timed calls of fn after `warmup` untimed ones (each call synchronized)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
