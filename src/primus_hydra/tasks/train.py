"""task=train: one training job through the PrimusRuntime."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig


class TrainTask:
    def __init__(self, cfg: DictConfig, run_dir: Optional[Path] = None):
        self.cfg = cfg
        self.run_dir = run_dir

    def run(self) -> Any:
        """In this process when it is already a rank of a job (torchrun, srun) or the job has one process;
        otherwise start the workers with torch's elastic agent, handing them this composed config."""
        from primus_hydra.config.validate import configured_world_size
        from primus_hydra.orchestrator.apply import apply_resource_plan, report_resource_plan, worker_environment
        from primus_hydra.runtime.distributed_env import detect_distributed_env

        run_dir = self.run_dir or hydra_run_dir()
        inside_job = detect_distributed_env().is_distributed
        if not inside_job and not self.cfg.task.dry_run:
            from primus_hydra.launch.slurm.run import slurm_launcher_settings, submit_single_run

            slurm = slurm_launcher_settings()
            if slurm is not None:  # platform=slurm: this run is one Slurm job
                return submit_single_run(self.cfg, run_dir, slurm)
        plan = apply_resource_plan(self.cfg)
        if inside_job or self.cfg.task.dry_run or configured_world_size(self.cfg) == 1:
            from primus_hydra.runtime.train_runtime import PrimusRuntime

            if not inside_job:  # a rank of a torchrun/srun job: its launcher owns the thread variables
                report_resource_plan(plan, run_dir)
            # set before this process imports torch, so its OpenMP/BLAS pools start at the planned size
            with worker_environment({} if inside_job else plan.worker_env):
                return PrimusRuntime(self.cfg, run_dir).run()
        from primus_hydra.launch.elastic import launch_elastic_job

        return launch_elastic_job(self.cfg, run_dir, plan)


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)
