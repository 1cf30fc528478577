"""task=preflight: one process per node (benchmark/preflight.py) checks the node and the cluster before a long job,
through the same launchers as training (this machine, or every node of a Slurm job)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, open_dict, read_write

from primus_hydra.config.choices import auto_int
from primus_hydra.tasks.train import TrainTask


def one_process_per_node(cfg: DictConfig) -> DictConfig:
    """The checks run once per node; the processes the real job would start per node become the GPU count to check,
    and the checkpoint dir a folder to check rather than one the preparation refuses."""
    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        if job.task.processes_per_node is None:
            job.task.processes_per_node = auto_int(cfg.launch.nproc_per_node)
        job.launch.nproc_per_node = 1
        if job.module.checkpoint.dir is not None:  # a folder the run could not write is a FAIL line, not a refusal
            job.task.checkpoint_dir = str(job.module.checkpoint.dir)
            job.module.checkpoint.dir = None
        job.module.parallel.tp = job.module.parallel.pp = job.module.parallel.cp = job.module.parallel.ep = 1
        job.module.parallel.dp = "auto"
        job.module.global_batch_size = int(job.module.micro_batch_size) * int(job.launch.nnodes)
    return job


class PreflightTask(TrainTask):
    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None, sweep_points: int = 1):
        return super().prepare_job(one_process_per_node(cfg), run_dir, plan=plan, sweep_points=sweep_points)
