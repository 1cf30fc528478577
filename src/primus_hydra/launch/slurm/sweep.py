"""`-m` sweeps with hydra/launcher=primus_slurm: compose and prepare every point here (for its Slurm world size),
then stage each point's run dir through Hydra's own run_job (.hydra files, job callbacks), submit (one array per
job shape), wait."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from primus_hydra.config.error_format import user_error_lines
from primus_hydra.config.paths import hydra_job_dir
from primus_hydra.config.targets import load_target
from primus_hydra.errors import ConfigValidationError
from primus_hydra.launch.slurm.run import SlurmJobFailedError, print_status_hint
from primus_hydra.launch.sweep.basic import save_sweep_record
from primus_hydra.launch.sweep.labels import fixed_overrides, point_label
from primus_hydra.util.tables import aligned_table


def launch_slurm_sweep(hydra_context: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]],
                       initial_job_idx: int) -> list[JobReturn]:
    from primus_hydra.launch.slurm.monitor import describe_submission, wait_for_jobs
    from primus_hydra.launch.slurm.submission import refuse_live_jobs, stage_job, submit_jobs

    settings = OmegaConf.to_container(config.hydra.launcher, resolve=True)
    fixed = fixed_overrides(config.hydra.overrides.task)  # what every point shares: not in its label
    points = [_sweep_point(hydra_context, config, list(overrides), initial_job_idx + i, fixed)
              for i, overrides in enumerate(job_overrides)]
    prepared = _prepare_all(points)  # a bad point: nothing is written or submitted
    # a point whose run dir still has a live job: refused before Hydra rewrites its .hydra/
    refuse_live_jobs([hydra_job_dir(sweep_config, sweep=True) for _, sweep_config in points], "hydra.sweep.dir")
    save_sweep_record(config)

    staged, returns = [], []
    for (label, sweep_config), job in zip(points, prepared):
        def stage(task_cfg: DictConfig, label: str = label, job=job):
            return stage_job(job, Path(HydraConfig.get().runtime.output_dir), settings, label)

        job_return = run_job(hydra_context=hydra_context, task_function=stage, config=sweep_config,
                             job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir", configure_logging=False)
        if job_return.status != JobStatus.COMPLETED:
            raise job_return._return_value  # staging failed (e.g. a run dir that cannot be written): nothing submitted
        staged.append(job_return.return_value)
        returns.append(job_return)

    sweep_dir = Path(str(config.hydra.sweep.dir))
    jobs = submit_jobs(staged, settings, sweep_dir, "hydra.sweep.dir")
    for job in jobs:
        print(f"submitted {describe_submission(job)}", file=sys.stderr, flush=True)
    if not config.launch.wait:
        print_status_hint([job.staged.run_dir for job in jobs])
        for job_return in returns:
            job_return.return_value = None
        return returns

    outcomes = wait_for_jobs(jobs, float(settings.get("poll_interval_s", 2.0)))
    failures = []
    for job_return, outcome in zip(returns, outcomes):
        job_return.return_value = outcome.result
        if not outcome.ok:
            failures.append(f"[{outcome.submitted.staged.label}] {outcome.error}")
    _print_summary(outcomes)
    if failures:
        raise SlurmJobFailedError("\n".join(failures))
    return returns


def _sweep_point(hydra_context: HydraContext, config: DictConfig, overrides: list[str], num: int, fixed: set):
    sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(sweep_config.hydra.job):
        sweep_config.hydra.job.id = f"slurm_{num}"  # the Slurm id does not exist yet: known after submission
        sweep_config.hydra.job.num = num
    return point_label(num, filter_overrides(overrides), fixed)[1:-1], sweep_config


def _prepare_all(points: list) -> list:
    """Every point prepared by its task for the Slurm job it will be (its world size from the job shape); every
    failure of every point reported together, labelled with its point."""
    prepared, failures = [], []
    for label, sweep_config in points:
        HydraConfig.instance().set_config(sweep_config)
        task_class = load_target(sweep_config.task._target_, "task._target_")
        try:
            prepared.append(task_class.prepare_job(sweep_config, None))
        except Exception as error:  # noqa: BLE001 - a user's error (a failed check, an interpolation) is its lines
            failures += [f"[{label}] {line}" for line in user_error_lines(error)]
    if failures:
        raise ConfigValidationError(failures)
    return prepared


def _print_summary(outcomes: list) -> None:
    rows = [(outcome.submitted.job_id, outcome.submitted.staged.label, outcome.state,
             f"{outcome.result:.4f}" if isinstance(outcome.result, float) else (outcome.error or "-"),
             str(outcome.submitted.staged.run_dir)) for outcome in outcomes]
    print("slurm sweep summary:\n" + aligned_table(("job", "point", "state", "objective", "run dir"), rows, rule=True),
          file=sys.stderr, flush=True)
