"""backend=torch's schema (conf/backend/torch.yaml); stored as schema/backend/torch. No torch import."""
from __future__ import annotations

from typing import Optional

from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.util.records import record


@record
class TorchBackendConfig(BackendConfig):
    num_threads: Optional[int] = None  # torch intra-op threads; null: leave torch's default
    deterministic: bool = True  # torch.use_deterministic_algorithms on CPU
    # each rank's peak memory in metrics.jsonl (peak_memory_gib): CUDA's allocator statistics every step; on the
    # CPU the torch profiler's allocation events over set-up and the first two steps (which it slows)
    measure_memory: bool = False
