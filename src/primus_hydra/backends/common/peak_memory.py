"""Each rank's peak memory, for backend.measure_memory=true (task=projection's calibration).

CUDA: the caching allocator's `max_memory_allocated`, reset every step. CPU: torch has no allocator statistics,
so the torch profiler records every allocation and free of the CPU allocator (profile_memory=True) from before
the model is built to the end of the second step (the first one that holds the optimizer's state); the peak is
the largest running sum of those events. Only tensors count, as on CUDA: not Python objects, not the allocator's
cached or fragmented pages.
"""
from __future__ import annotations

from typing import Optional

import torch

from primus_hydra.backends.common.distributed import all_gather_objects

GIB = 1024.0 ** 3
PROFILED_STEPS = 2


class PeakMemory:
    def __init__(self, device: torch.device, enabled: bool):
        self.device, self.enabled = device, enabled
        self._profiler = None
        self._steps = 0

    def start(self) -> None:
        if not self.enabled or self.device.type == "cuda":
            return
        from torch.profiler import ProfilerActivity, profile

        self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._profiler.start()

    def before_step(self) -> None:
        if self.enabled and self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def after_step(self) -> Optional[list[float]]:
        """Every rank's peak (GiB) when this step measured one, else None. Collective when enabled."""
        if not self.enabled:
            return None
        self._steps += 1
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device) / GIB
        elif self._profiler is not None and self._steps == PROFILED_STEPS:
            peak = self._stop_profiler()
        else:
            return None
        return all_gather_objects(peak)

    def _stop_profiler(self) -> float:
        self._profiler.stop()
        events = [event for event in self._profiler.profiler.kineto_results.events() if event.name() == "[memory]"]
        events.sort(key=lambda event: event.start_ns())
        live = peak = 0
        for event in events:
            live += event.nbytes()
            peak = max(peak, live)
        self._profiler = None
        return peak / GIB
