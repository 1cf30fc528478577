"""task=benchmark: a suite (gemm, attention, collectives) measured by the job's workers (benchmark/runner.py),
prepared, launched and reported like a training job. Its own arguments are checked first, one line each; the memory
check and the plan use what the suite's largest case allocates (benchmark/cases.py), not a training step's."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.benchmark.cases import (
    CPU_DTYPES,
    DTYPE_NAMES,
    GIB,
    AttentionCase,
    CollectiveCase,
    GemmCase,
    largest,
    rounding_note,
    suite_cases,
)
from primus_hydra.config.layout import configured_world_size
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.fit_checks import MemoryNeed
from primus_hydra.orchestrator.gpu_probe import detect_gpus
from primus_hydra.orchestrator.working_set import CONTEXT_OVERHEAD_GIB
from primus_hydra.tasks.train import TrainTask

MAX_WARMUP = 1000  # untimed repetitions of one case
MAX_ITERS = 1000  # timed repetitions of one case


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
    if not 0 <= int(task.warmup) <= MAX_WARMUP:
        failures.append(f"task.warmup={task.warmup}: must be an integer in [0, {MAX_WARMUP}] (untimed repetitions "
                        "of each case)")
    if not 1 <= int(task.iters) <= MAX_ITERS:
        failures.append(f"task.iters={task.iters}: must be an integer in [1, {MAX_ITERS}] (timed repetitions of "
                        "each case; their median is reported)")
    if str(task.suite) == "collectives" and world_size is not None and world_size < 2:
        failures.append("task.suite=collectives needs at least 2 processes: set launch.nproc_per_node=2 (or "
                        "launch.nnodes=2 with platform=slurm)")
    return failures


def suite_memory_need(cfg: DictConfig, cases: list) -> MemoryNeed:
    """What one rank holds at the suite's largest case (the cases run one at a time, each freed before the next)."""
    case = largest(cases)
    sizes = f", task.sizes={list(cfg.task.sizes)}" if cfg.task.sizes else ""
    what = (f"task.suite={cfg.task.suite}{sizes}: its largest case, {case.label}, holds "
            f"{case.nbytes / GIB:.1f} GiB")
    if isinstance(case, GemmCase) and case.shape == "square":
        fixes = "use smaller task.sizes (a gemm of M = N = K = s holds 3 s^2 elements)"
    elif isinstance(case, (GemmCase, AttentionCase)):
        fixes = ("lower module.micro_batch_size or module.seq_length (the model's shapes are for one micro batch), "
                 "or raise module.parallel.tp")
    else:
        fixes = "use smaller task.sizes (bytes per buffer)"
    return MemoryNeed(case.nbytes / GIB + CONTEXT_OVERHEAD_GIB, what, fixes)


def runs_on_cpu(cfg: DictConfig) -> bool:
    if str(cfg.platform.device) != "auto":
        return str(cfg.platform.device) == "cpu"
    import os

    return not detect_gpus(os.environ).gpus


class BenchmarkTask(TrainTask):
    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None, sweep_points: int = 1):
        on_cpu = runs_on_cpu(cfg)
        world = configured_world_size(cfg)
        failures = benchmark_failures(cfg, world, on_cpu)
        if failures:
            raise ConfigValidationError(failures)
        cases = suite_cases(cfg, on_gpu=not on_cpu, world=world or 1)
        job = super().prepare_job(one_micro_batch_per_rank(cfg, world), run_dir, plan=plan, sweep_points=sweep_points,
                                  memory_need=suite_memory_need(cfg, cases))
        notes = sorted({rounding_note(c) for c in cases if isinstance(c, CollectiveCase) and c.rounded})
        job.warnings += [f"task.sizes: {note}" for note in notes]
        return job


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
