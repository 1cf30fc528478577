"""primus-hydra's two Hydra callbacks (conf/hydra/callbacks/primus.yaml).

hydra.callbacks.prepare prepares a single run before Hydra creates its run directory: the selected task prepares
its job (orchestrator/prepare.py); a rejected run stops here with one `error:` line per failure and exit code 2, and
leaves nothing behind. Hydra turns exceptions raised in callbacks into warnings, so this callback exits itself
(SystemExit passes through). The prepared job is handed to the task (JobHandoff). When the job starts, Hydra's
records in the run dir become owner-only and its log handlers blank secrets out.

hydra.callbacks.patches imports the patch modules at job start, so that their patches register; since Hydra only
warns on a callback's exception, an import failure is recorded in the registry, and preparing the job stops with
it as one line, before any process starts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from primus_hydra.config.error_format import stop_with, user_error_lines
from primus_hydra.config.paths import hydra_job_dir
from primus_hydra.config.secrets import secret_values
from primus_hydra.config.targets import task_class_of
from primus_hydra.orchestrator.prepare import HANDOFF, show_warnings
from primus_hydra.patches.runner import load_patch_modules


class PrepareJobCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            prepare_single_run(config)
        except Exception as error:  # noqa: BLE001 - a user's error (a failed check, an interpolation) is its lines
            stop_with([f"error: {line}" for line in user_error_lines(error)], getattr(error, "exit_code", 2))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Hydra has just written .hydra/*.yaml (the overrides as typed) and set up its logging: those files become
        readable by their owner only, and every log handler blanks the job's secret values out."""
        from primus_hydra.runtime.logging_setup import redact_secrets_in_logs
        from primus_hydra.util.private_files import make_private

        if config.hydra.output_subdir is not None:
            hydra_dir = Path(config.hydra.runtime.output_dir) / str(config.hydra.output_subdir)
            make_private(hydra_dir / name for name in ("config.yaml", "hydra.yaml", "overrides.yaml"))
        redact_secrets_in_logs(secret_values(config))


class PatchRegistrationCallback(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        load_patch_modules(config)


def prepare_single_run(config: DictConfig) -> None:
    """The selected task prepares the job of `config` (composed with its `hydra` node) for its run dir, holds the
    run dir, shows the job's warnings and hands the job over (HANDOFF); raises what the preparation raises, having
    written nothing. A task without `prepare_job` (another app's) has nothing to prepare."""
    stay_in_working_dir_if_query(config)
    prepare_job = getattr(task_class_of(config), "prepare_job", None)
    if prepare_job is None:
        return
    run_dir = hydra_job_dir(config, sweep=False)
    # a folder another live run is using: refused first, and held before Hydra writes .hydra/ into it
    claim_run_dir = getattr(task_class_of(config), "claim_run_dir", lambda *args, **kwargs: None)
    claim_run_dir(config, run_dir, check_only=True)
    job = prepare_job(config, run_dir)
    claim_run_dir(config, run_dir, placement=getattr(job, "placement", None))  # a train job's, decided once
    show_warnings(job)
    HANDOFF.give(run_dir, job)


def stay_in_working_dir_if_query(config: DictConfig) -> None:
    """A task that writes nothing (`writes_nothing`: task=status, task=plan) runs in the current folder with no
    `.hydra/`, whatever hydra.run.dir an experiment, the command line or run()'s run_dir gives: Hydra then makes
    no folder for it."""
    from omegaconf import open_dict, read_write

    if getattr(task_class_of(config), "writes_nothing", False):
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.run.dir = "."
            config.hydra.output_subdir = None
