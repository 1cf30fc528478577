"""task=benchmark: a suite (gemm, attention, collectives) measured by the job's workers (benchmark/runner.py),
prepared, launched and reported like a training job; its own arguments are checked first, one line each."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.errors import ConfigValidationError
from primus_hydra.tasks.train import TrainTask

DTYPE_NAMES = ("fp32", "bf16", "fp16", "fp8")
CPU_DTYPES = ("fp32", "bf16", "fp16")


def benchmark_failures(cfg: DictConfig, world_size: Optional[int], on_cpu: bool) -> list[str]:
    task, failures = cfg.task, []
    if task.suite is None:
        failures.append("task.suite=null: choose gemm, attention or collectives")
    sizes = list(task.sizes or [])
    if any(int(size) < 1 for size in sizes):
        failures.append(f"task.sizes={sizes}: every size must be a positive integer")
    for name in task.dtypes or []:
        if name not in DTYPE_NAMES:
            failures.append(f"task.dtypes: '{name}' is not one of {', '.join(DTYPE_NAMES)}")
        elif on_cpu and name not in CPU_DTYPES:
            failures.append(f"task.dtypes: {name} needs a GPU that has it; this CPU has {', '.join(CPU_DTYPES)}")
    if int(task.warmup) < 0 or int(task.iters) < 1:
        failures.append(f"task.warmup={task.warmup}, task.iters={task.iters}: warmup must be >= 0 and iters >= 1")
    if str(task.suite) == "collectives" and world_size is not None and world_size < 2:
        failures.append("task.suite=collectives needs at least 2 processes: set launch.nproc_per_node=2 (or "
                        "launch.nnodes=2 with platform=slurm)")
    return failures


class BenchmarkTask(TrainTask):
    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None, sweep_points: int = 1):
        from primus_hydra.config.layout import configured_world_size

        on_cpu = str(cfg.platform.device) == "cpu"
        if str(cfg.platform.device) == "auto":
            import os

            from primus_hydra.orchestrator.gpu_probe import detect_gpus

            on_cpu = not detect_gpus(os.environ).gpus
        world = configured_world_size(cfg)
        failures = benchmark_failures(cfg, world, on_cpu)
        if failures:
            raise ConfigValidationError(failures)
        return super().prepare_job(one_micro_batch_per_rank(cfg, world), run_dir, plan=plan, sweep_points=sweep_points)


def one_micro_batch_per_rank(cfg: DictConfig, world: Optional[int]) -> DictConfig:
    """No training step runs: the global batch becomes one micro batch per data-parallel rank, so that any process
    count is a valid layout (the gemm and attention shapes read the micro batch, never the global one)."""
    import copy

    from omegaconf import open_dict, read_write

    p = cfg.module.parallel
    if world is None or world % (p.tp * p.pp * p.cp):
        return cfg
    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        job.module.global_batch_size = int(cfg.module.micro_batch_size) * world // (p.tp * p.pp * p.cp)
    return job
