"""The memory one rank of a training job needs on its device, for sizing concurrency on this machine (no torch).

The projection's memory model (projection/memory.py: the backend's bytes per parameter on the most loaded rank,
activations per recompute setting and micro batches in flight, calibrated against measured peaks on the CPU,
docs/projection.md) plus CONTEXT_OVERHEAD_GIB for the CUDA/HIP context, communication buffers and allocator
slack. A sweep's probe replaces it with the measured peak.
"""
from __future__ import annotations

from typing import Any

from primus_hydra.backends.base import adapter_class
from primus_hydra.config.layout import ParallelLayout
from primus_hydra.projection.layout import projection_layout
from primus_hydra.projection.memory import GIB, most_loaded_stage
from primus_hydra.projection.project import workload_of

CONTEXT_OVERHEAD_GIB = 1.0


def estimate_rank_gib(cfg: Any, parallel: ParallelLayout, *, overhead_gib: float = CONTEXT_OVERHEAD_GIB) -> float:
    """The most loaded rank of the job split as `parallel` says, as its backend applies it."""
    layout = projection_layout(cfg, parallel, parallel.world_size, adapter_class(cfg).traits)
    work = workload_of(cfg)
    return most_loaded_stage(work.model, layout, work.seq_length, 0.0).total / GIB + overhead_gib
