"""What the primus_basic sweeper (hydra_plugins/primus_sweeper) checks before each batch it hands to a launcher.

Hydra's basic launcher runs every point in this process, in a run dir it makes first: so, as for a single run,
every point of the batch is prepared here before any starts (a bad point stops the sweep, exit 2, nothing
written) and its job is handed to its task (JobHandoff). Other launchers prepare their points themselves
(primus_local, primus_slurm) or run them elsewhere; for them the batch is only checked to compose, cheaply
(launch/sweep_compose.py).
"""
from __future__ import annotations

from typing import Sequence

from hydra.core.utils import filter_overrides
from omegaconf import DictConfig, open_dict, read_write

from primus_hydra.config.error_format import stop_with, user_error_lines
from primus_hydra.config.paths import hydra_job_dir
from primus_hydra.config.targets import task_class_of
from primus_hydra.launch.sweep_compose import SweepComposer


def check_batch(hydra_context, config: DictConfig, launcher, batch: Sequence[Sequence[str]], first_job: int) -> None:
    """Raise (or exit with one line per failure) what running this batch would hit before any point starts."""
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    composer = SweepComposer(hydra_context.config_loader, config)
    task_class = task_class_of(config)
    if not isinstance(launcher, BasicLauncher) or not hasattr(task_class, "prepare_job"):
        for overrides in batch:
            composer.check(overrides)
        return
    from primus_hydra.orchestrator.prepare import HANDOFF, show_warnings

    prepared, failures = [], []
    for offset, overrides in enumerate(batch):
        label = f"[job {first_job + offset}: {' '.join(filter_overrides(overrides))}]"
        try:
            point = composer.compose(overrides)
            with read_write(point.hydra), open_dict(point):  # as the basic launcher numbers its jobs
                point.hydra.job.id = point.hydra.job.num = first_job + offset
            run_dir = hydra_job_dir(point, sweep=True)
            prepared.append((run_dir, task_class.prepare_job(point, run_dir)))
        except Exception as error:  # noqa: BLE001 - a user's error (a failed check, an interpolation) is its lines
            failures += [f"error: {label} {line}" for line in user_error_lines(error)]
    if failures:
        stop_with(failures, 2)
    for (run_dir, job), overrides in zip(prepared, batch):
        show_warnings(job, label=f"[{' '.join(filter_overrides(overrides))}] ")
        HANDOFF.give(run_dir, job)
