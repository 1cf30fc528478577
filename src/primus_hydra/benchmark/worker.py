"""The base of task=benchmark's and task=preflight's workers: the job's device and process group (gloo on the CPU,
NCCL/RCCL on GPUs) as the native trainer sets them up, nothing else; released at the end."""
from __future__ import annotations

import torch
import torch.distributed as dist

from primus_hydra.backends.base import BaseTrainer


class MeasuringWorker(BaseTrainer):
    def setup(self) -> None:
        from primus_hydra.backends.common.distributed import join_process_group, resolve_device

        self.device = resolve_device(str(self.cfg.platform.device), self.dist.local_rank)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.layout.world_size > 1:
            join_process_group(self.device, self.dist, float(self.cfg.launch.timeout_s))

    def cleanup(self, on_error: bool = False) -> None:
        if dist.is_initialized() and not on_error:
            dist.destroy_process_group()
