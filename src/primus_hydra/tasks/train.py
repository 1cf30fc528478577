"""task=train: prepare the job once, then run it where it belongs.

In this process when it is already a rank of a job (torchrun, srun), a dry run, or a job of one process; on Slurm
as one submitted job when the primus_slurm launcher is selected (platform=slurm); otherwise through torch's
elastic agent, which starts the workers with the prepared job. Where it runs is decided once, when the job is
prepared (placement_of), and travels with it (PreparedJob.placement).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.distributed_env import DistributedEnv, detect_distributed_env
from primus_hydra.launch.job_config import write_job_config
from primus_hydra.launch.run_dir_lock import RUN_DIR_LOCKS
from primus_hydra.launch.sweep.concurrency import in_multirun, points_run_at_once_here
from primus_hydra.orchestrator.apply import report_resource_plan, worker_environment
from primus_hydra.orchestrator.prepare import HANDOFF, Placement, PreparedJob, prepare, show_warnings
from primus_hydra.runtime.train_runtime import PrimusRuntime
from primus_hydra.tasks.objective import run_objective


class TrainTask:
    def __init__(self, cfg: DictConfig, run_dir: Optional[Path] = None, job: Optional[PreparedJob] = None):
        self.cfg = cfg
        self.run_dir = run_dir
        self.job = job

    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None, sweep_points: int = 1,
                    memory_need=None) -> PreparedJob:
        """Prepared for where it will run: as a rank of a running job, as a Slurm job, or on this machine.
        memory_need: what a rank of a job that does not train holds (orchestrator/fit_checks.py: MemoryNeed)."""
        placement = placement_of(cfg)
        dry_run = bool(cfg.task.dry_run)
        if placement.kind == "rank":  # its launcher (torchrun, srun) started the ranks and owns the machine
            job = prepare(cfg, run_dir=run_dir, world_size=placement.dist.world_size, launched=True,
                          trains=not dry_run)
        elif placement.kind == "slurm":
            from primus_hydra.launch.slurm.job_shape import job_shape

            shape = job_shape(cfg, placement.slurm)
            fixed = {"launch.nproc_per_node": shape.processes_per_node, "module.checkpoint.on_signal": True}
            job = prepare(cfg, run_dir=run_dir, world_size=shape.world_size, on_this_machine=False, fixed=fixed)
        else:
            job = prepare(cfg, run_dir=run_dir, plan=plan, sweep_points=sweep_points, trains=not dry_run,
                          memory_need=memory_need)
        job.placement = on_this_machine(placement, job)
        return job

    @classmethod
    def claim_run_dir(cls, cfg: DictConfig, run_dir: Path, *, check_only: bool = False,
                      placement: Optional[Placement] = None) -> None:
        """The run dir becomes this run's (RunDirBusyError while another live run holds it): taken by the process
        that owns the run, only checked by one that submits it to Slurm (its job takes it on the cluster) and by
        anyone before the job is prepared (which must leave nothing behind when it fails). placement: the prepared
        job's (placement_of decides it for a job not prepared yet)."""
        placement = placement or placement_of(cfg)
        dist = placement.dist
        if dist.is_distributed and dist.rank != 0:  # rank 0 holds it for the ranks its launcher started
            return
        if int(cfg.launch.node_rank) != 0:  # each node's agent shares the run dir: the first node's holds it
            return
        submits = placement.kind == "slurm"
        if check_only or submits:
            RUN_DIR_LOCKS.check_free(run_dir)
            if submits:  # nor while the run dir's earlier Slurm job is queued or running
                from primus_hydra.launch.slurm.submission import refuse_live_jobs

                refuse_live_jobs([run_dir], "hydra.run.dir")
        else:
            RUN_DIR_LOCKS.acquire(run_dir)

    def run(self) -> Any:
        run_dir = self.run_dir or hydra_run_dir()
        job = self.job or HANDOFF.take(run_dir)
        if job is None:  # not prepared by the single-run callback or a launcher (joblib's, submitit_local's sweeps)
            self.claim_run_dir(self.cfg, run_dir, check_only=True)
            job = self.prepare_job(self.cfg, run_dir, sweep_points=points_run_at_once_here())
            show_warnings(job)
        placement = job.placement or on_this_machine(placement_of(job.cfg), job)
        self.claim_run_dir(job.cfg, run_dir, placement=placement)
        try:
            result = self._run_prepared(job, placement, run_dir)
        finally:
            RUN_DIR_LOCKS.release(run_dir)

        dist = placement.dist
        if dist.is_distributed and not dist.is_main:  # rank 0 wrote the metrics; its result is what launchers collect
            return result
        return run_objective(job.cfg, run_dir, say=in_multirun() and not dist.is_distributed)

    def _run_prepared(self, job: PreparedJob, placement: Placement, run_dir: Path) -> Any:
        if placement.kind != "slurm" and not job.cfg.task.dry_run and placement.dist.is_main \
                and int(job.cfg.launch.node_rank) == 0:
            from primus_hydra.launch.provenance import record_provenance  # git's and pip's records: not a dry run's

            record_provenance(run_dir, job.cfg, launcher=placement.kind)  # a Slurm job's: when it is submitted
        if placement.kind == "slurm":  # platform=slurm: this run is one Slurm job
            from primus_hydra.launch.slurm.run import submit_single_run

            return submit_single_run(job, run_dir, placement.slurm)
        if job.cfg.task.dry_run and placement.dist.is_main:  # the job config its workers would get, arguments and all
            write_job_config(job, run_dir)
        if placement.kind == "elastic":
            from primus_hydra.launch.elastic import launch_elastic_job

            return launch_elastic_job(job, run_dir)
        return run_in_this_process(job, run_dir, placement.dist, report_plan=placement.kind != "rank")


def run_in_this_process(job: PreparedJob, run_dir: Path, dist: DistributedEnv, *, report_plan: bool) -> Any:
    """The runtime here. A rank of a torchrun/srun job keeps the thread variables its launcher gave it; otherwise
    the plan's are set before the runtime imports torch, so its OpenMP/BLAS pools start at the planned size."""
    planned = report_plan and job.plan is not None
    if planned:
        report_resource_plan(job.plan, run_dir)
        if "torch" in sys.modules:  # a process that ran an earlier point (joblib's workers): its pool is sized
            sys.modules["torch"].set_num_threads(job.plan.threads_per_worker)
    with worker_environment(job.plan.worker_env if planned else {}):
        return PrimusRuntime(job, run_dir, dist).run()


def placement_of(cfg: DictConfig) -> Placement:
    """Where a job of `cfg` runs, as far as the config and this process tell before it is prepared: as a rank of a
    job its launcher started (torchrun, srun), as one Slurm job (platform=slurm; a dry run never submits), else on
    this machine (prepare_job then picks this process or torch's elastic agent by the job's world size)."""
    dist = detect_distributed_env()
    if dist.is_distributed:
        return Placement("rank", dist)
    slurm = None if cfg.task.dry_run else slurm_launcher_settings(cfg)
    return Placement("slurm", dist, slurm) if slurm is not None else Placement("this_machine", dist)


def on_this_machine(placement: Placement, job: PreparedJob) -> Placement:
    """A job placed on this machine runs in this process (a dry run, one process) or through torch's elastic agent."""
    if placement.kind != "this_machine":
        return placement
    in_this_process = job.cfg.task.dry_run or job.layout.world_size == 1
    return dataclasses.replace(placement, kind="this_process" if in_this_process else "elastic")


def slurm_launcher_settings(cfg: Optional[DictConfig] = None) -> Optional[dict]:
    """The primus_slurm launcher's settings when it is the selected hydra/launcher (platform=slurm), else None.
    Read from cfg's `hydra` node when it has one (the callback's), else from HydraConfig (the task's)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from primus_hydra.launch.slurm.run import SLURM_LAUNCHER_TARGET

    if cfg is not None and "hydra" in cfg:
        launcher = cfg.hydra.launcher
    elif HydraConfig.initialized():
        launcher = HydraConfig.get().launcher
    else:
        return None
    if launcher.get("_target_") != SLURM_LAUNCHER_TARGET:
        return None
    return OmegaConf.to_container(launcher, resolve=True)


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)
