"""task=preflight: one process per node (benchmark/preflight.py) checks the node and the cluster before a long job,
through the same launchers as training (this machine, or every node of a Slurm job). Its memory check is for what
the checks allocate (a GEMM and an all_reduce, benchmark/cases.py), not for training the configured model."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, open_dict, read_write

from primus_hydra.benchmark.cases import GIB, largest, preflight_cases
from primus_hydra.config.choices import auto_int
from primus_hydra.orchestrator.fit_checks import MemoryNeed
from primus_hydra.orchestrator.working_set import CONTEXT_OVERHEAD_GIB
from primus_hydra.tasks.benchmark import runs_on_cpu
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


def preflight_memory_need(cfg: DictConfig) -> MemoryNeed:
    case = largest(preflight_cases(not runs_on_cpu(cfg), int(cfg.launch.nnodes)))
    return MemoryNeed(case.nbytes / GIB + CONTEXT_OVERHEAD_GIB,
                      f"task=preflight: its largest measurement, {case.label}, holds {case.nbytes / GIB:.1f} GiB",
                      "free memory on this node")


class PreflightTask(TrainTask):
    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None, sweep_points: int = 1):
        return super().prepare_job(one_process_per_node(cfg), run_dir, plan=plan, sweep_points=sweep_points,
                                   memory_need=preflight_memory_need(cfg))
