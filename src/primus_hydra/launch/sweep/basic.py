"""What the primus_basic sweeper (hydra_plugins/primus_sweeper) checks before a sweep starts and before each batch
it hands to a launcher.

The sweep's arguments first: a key swept twice (`module.lr=1e-3,2e-3 module.lr=3e-3` would silently keep the
last), a sweep over no values (`range(5,1)`), a batch size below 1, a sweep dir that cannot be written. Then every
batch, before the first one launches and before the sweep dir exists:

Hydra's basic launcher runs every point in this process, in a run dir it makes first: so, as for a single run,
every point of the batch is prepared here before any starts (a bad point stops the sweep, exit 2, nothing
written) and its job is handed to its task (JobHandoff). Other launchers prepare their points themselves
(primus_local, primus_slurm) or run them elsewhere; for them the batch is only checked to compose, cheaply
(launch/sweep/compose.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from hydra.core.utils import filter_overrides
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from primus_hydra.config.error_format import stop_with, user_error_lines
from primus_hydra.config.paths import hydra_job_dir, output_root_failure, writable_dir_failure
from primus_hydra.config.targets import task_class_of
from primus_hydra.errors import PrimusError, SweepPointFailed, SweepPointsFailed
from primus_hydra.launch.sweep.compose import SweepComposer
from primus_hydra.launch.sweep.labels import fixed_overrides, point_label, shown, varying_overrides
from primus_hydra.orchestrator.prepare import HANDOFF, show_warnings


def check_batch(hydra_context, config: DictConfig, launcher, batch: Sequence[Sequence[str]], first_job: int) -> None:
    """Raise (or exit with one line per failure) what running this batch would hit before any point starts."""
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    composer = SweepComposer(hydra_context.config_loader, config)
    task_class = task_class_of(config)
    if not isinstance(launcher, BasicLauncher) or not hasattr(task_class, "prepare_job"):
        for overrides in batch:
            composer.check(overrides)
        return

    fixed = fixed_overrides(config.hydra.overrides.task)
    prepared, failures = [], []
    for offset, overrides in enumerate(batch):
        label = point_label(first_job + offset, filter_overrides(overrides), fixed)
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
        show_warnings(job, label=f"[{shown(varying_overrides(filter_overrides(overrides), fixed))}] ")
        HANDOFF.give(run_dir, job)


SWEEP_RECORD = "multirun.yaml"  # Hydra's record of the sweep's config, at the top of the sweep dir


def check_sweep_arguments(config: DictConfig, overrides: list, max_batch_size: Optional[int]) -> None:
    """Exit with one line per mistake in the sweep's own arguments (parsed overrides), before anything runs."""
    from hydra.core.override_parser.types import ValueType

    failures = []
    if max_batch_size is not None and max_batch_size < 1:
        failures.append(f"hydra.sweeper.max_batch_size={max_batch_size}: must be >= 1 (or null: one batch)")
    seen: dict[str, list[str]] = {}
    for override in overrides:
        seen.setdefault(override.get_key_element(), []).append(override.input_line)
        if override.is_discrete_sweep() and override.value_type != ValueType.GLOB_CHOICE_SWEEP and not list(override.sweep_iterator()):
            failures.append(f"{override.input_line}: sweeps over no values; give at least one")
    failures += [f"{key} is given {len(lines)} times on the command line ({', '.join(lines)}): only the last would "
                 f"count; give it once (a,b,c sweeps over several values)" for key, lines in seen.items() if len(lines) > 1]
    fix = "set hydra.sweep.dir or PRIMUS_OUTPUT_ROOT to a writable folder"
    failures += [line for line in (output_root_failure(),
                                   writable_dir_failure("hydra.sweep.dir", config.hydra.sweep.dir, fix)) if line]
    if failures:
        stop_with([f"error: {line}" for line in failures], 2)


def save_sweep_record(config: DictConfig) -> Path:
    """The sweep dir and Hydra's multirun.yaml in it, written once the sweep's points are known to be good."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / SWEEP_RECORD)
    return sweep_dir


def raise_for_failed_points(returns: Sequence) -> None:
    """After every batch ran: one line counting the failed points (each already printed its own error; a point
    that crashed gets its traceback here), exit 1 through the CLI. Nothing when every point completed."""
    import sys
    import traceback

    from hydra.core.utils import JobStatus

    failed = [result for result in returns if result.status == JobStatus.FAILED]
    for result in failed:
        error = result._return_value
        if isinstance(error, SweepPointsFailed):  # a launcher that summarized its points itself (primus_local)
            raise error
        if not isinstance(error, (SweepPointFailed, PrimusError)):
            print(f"[job {result.hydra_cfg.hydra.job.num}: {shown(result.overrides)}] crashed:", file=sys.stderr)
            traceback.print_exception(type(error), error, error.__traceback__)
    if failed:  # why each failed, also where its own line went to a log of its own (submitit_local)
        reasons = [str(result._return_value) if isinstance(result._return_value, SweepPointFailed)
                   else f"[job {result.hydra_cfg.hydra.job.num}] {type(result._return_value).__name__}"
                   for result in failed]
        shown_reasons = " | ".join(reasons[:3]) + (f" | ... {len(reasons) - 3} more" if len(reasons) > 3 else "")
        raise SweepPointsFailed(f"{len(failed)} of {len(returns)} sweep point(s) failed, the others completed: "
                                f"{shown_reasons}")
