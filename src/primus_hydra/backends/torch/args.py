"""What the native trainer reads: the typed config sections (the schema's own dataclasses, made by
OmegaConf.to_object) and the job's layout, in one frozen object. A build_args patch that changes something makes
a changed copy with dataclasses.replace (see patches.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from primus_hydra.config.layout import ParallelLayout
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.config.schema_module import ModuleConfig
from primus_hydra.config.schema_run import Device


@dataclass(frozen=True)
class TorchTrainingArgs:
    model: ModelConfig
    module: ModuleConfig  # module.checkpoint.dir is resolved (default: <run_dir>/checkpoints)
    layout: ParallelLayout
    device: Device
    peak_tflops_per_device: Optional[float]  # None: measured on the CPU, unknown on GPUs
    timeout_s: float  # collective timeout (launch.timeout_s)
    deterministic: bool
    num_threads: Optional[int]
    measure_memory: bool = False  # each rank's peak memory in metrics.jsonl (backends/common/peak_memory.py)

    @property
    def lr_decay_iters(self) -> int:
        return self.module.lr_decay_iters or self.module.train_iters
