"""The base of task=benchmark's and task=preflight's workers: the job's device and process group (gloo on the CPU,
NCCL/RCCL on GPUs) as every trainer sets them up (distributed.py: set_up_rank), nothing else; released at the end."""
from __future__ import annotations

import torch.distributed as dist

from primus_hydra.backends.base import BaseTrainer
from primus_hydra.backends.common.distributed import set_up_rank


class MeasuringWorker(BaseTrainer):
    def setup(self) -> None:
        self.device = set_up_rank(str(self.cfg.platform.device), self.dist, float(self.cfg.launch.timeout_s))

    def cleanup(self, on_error: bool = False) -> None:
        if dist.is_initialized() and not on_error:
            dist.destroy_process_group()
