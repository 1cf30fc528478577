"""`-m` sweeps of another Hydra app's task with hydra/launcher=primus_slurm: one Slurm job per point (one array),
each running Hydra's own run_job on its node, as hydra-submitit-launcher does; the job shape and queue settings
come from hydra.launcher.* (one node, one task unless they say otherwise). primus-hydra's own tasks go through
launch/slurm/sweep.py (prepared here, trusted on the nodes)."""
from __future__ import annotations

import sys
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from omegaconf import OmegaConf

from primus_hydra.config.schema_run import LaunchMode
from primus_hydra.launch.slurm.job_shape import SlurmJobShape, check_time_limits, executor_parameters
from primus_hydra.launch.sweep.basic import save_sweep_record


def launch_generic_sweep(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """`launcher` is the PrimusSlurmLauncher: submitit pickles it, and its __call__ runs a point on the node."""
    import submitit

    config = launcher.config
    settings = OmegaConf.to_container(config.hydra.launcher, resolve=True)
    check_time_limits(settings)
    sweep_dir = save_sweep_record(config)
    folder = settings.get("submitit_folder") or str(sweep_dir / ".submitit" / "%j")
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=int(settings.get("max_num_timeout", 3)))
    shape = SlurmJobShape(mode=LaunchMode.srun, nodes=int(settings.get("nodes") or 1),
                          processes_per_node=int(settings.get("tasks_per_node") or 1),
                          gpus_per_node=settings.get("gpus_per_node"))
    executor.update_parameters(**executor_parameters(settings, shape, str(settings.get("name") or "hydra")))
    points = []
    for offset, overrides in enumerate(job_overrides):
        number = initial_job_idx + offset
        print(f"[slurm] #{number}: {' '.join(filter_overrides(overrides))}", file=sys.stderr, flush=True)
        points.append((list(overrides), "hydra.sweep.dir", number, f"job_id_for_{number}", Singleton.get_state()))
    with executor.batch():
        jobs = [executor.submit(launcher, *point) for point in points]
    return [job.results()[0] for job in jobs]
