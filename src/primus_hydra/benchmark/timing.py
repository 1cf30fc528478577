"""Wall time of a repeated operation on a device: warm-up, then the median of timed iterations."""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], device: torch.device, *, warmup: int, iters: int,
                   tick: Optional[Callable[[], None]] = None) -> float:
    """The median of `iters` timed calls of fn after `warmup` untimed ones (each call synchronized). `tick` is called
    after every call, warm-up included (the progress reporter's heartbeat)."""
    for _ in range(warmup):
        fn()
        if tick is not None:
            tick()
    synchronize(device)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
        if tick is not None:
            tick()
    return statistics.median(times)
