"""The command line: `python -m primus_hydra [overrides]` and the `primus-hydra` console script.

Both are `@hydra.main` on conf/config.yaml with the full Hydra CLI (--cfg, --info, -m, --config-dir, ...).
Errors the user can fix are printed as one line and exit with code 2; set HYDRA_FULL_ERROR=1 for tracebacks.
"""
from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import hydra
from omegaconf import Container, DictConfig, OmegaConf

from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config.fast_composition import install as install_fast_composition
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.secrets import redacted_stdout, warn_about_literal_secrets
from primus_hydra.distributed_env import launch_environment_failures, stray_launch_variables
from primus_hydra.errors import PrimusError, SweepPointFailed
from primus_hydra.tasks.query import answered_query
from primus_hydra.tasks.single_run import ran_single_run
from primus_hydra.util.process_exit import exit_without_teardown

_USER_WANTS_TRACEBACK = os.environ.get("HYDRA_FULL_ERROR") == "1"
# Hydra's flags that print something and run no job
INFO_FLAGS = {"--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "--shell-completion", "-sc"}


def _report(error: PrimusError, prefix: str = "") -> None:
    for line in str(error).splitlines() or [type(error).__name__]:
        print(f"error: {prefix}{line}", file=sys.stderr)


@hydra.main(version_base="1.3", config_path=find_conf_dir(), config_name="config")
def _hydra_main(cfg: DictConfig):
    from primus_hydra.tasks import run_task  # --cfg and --help answer without it

    if not gc.isenabled() and not cfg.task.get("dry_run", False):
        # paused for start-up (__main__.console_script): the task runs with Python's collector, which leaves what
        # start-up made (the config, the modules: kept for the run anyway) unscanned. A dry run writes the backend's
        # arguments and ends: it runs without.
        gc.freeze()
        gc.enable()
    try:
        return run_task(cfg)
    except PrimusError as error:
        if _USER_WANTS_TRACEBACK:
            raise
        label = _sweep_point_label()
        _report(error, prefix=label)
        if label:  # a failed result of the sweep, which its launcher and sweeper see; the other points run
            raise SweepPointFailed(f"{label}{error}", error.exit_code) from None
        # Exit from inside the job: Hydra would otherwise add its own "Error executing job" report.
        raise SystemExit(error.exit_code) from None


def _sweep_point_label() -> str:
    from hydra.core.hydra_config import HydraConfig

    from primus_hydra.launch.sweep.basic import SWEEP_RECORD
    from primus_hydra.launch.sweep.concurrency import in_multirun
    from primus_hydra.launch.sweep.labels import fixed_overrides, point_label, recorded_command_line

    if not in_multirun():
        return ""
    hydra_cfg = HydraConfig.get()
    fixed = fixed_overrides(recorded_command_line(Path(str(hydra_cfg.sweep.dir)) / SWEEP_RECORD))
    return point_label(hydra_cfg.job.num, list(hydra_cfg.overrides.task), fixed) + " "


def main() -> None:
    install_fast_composition()  # first: the schemas are converted when composition loads them
    register_schemas()
    failures = launch_environment_failures()
    if failures:
        for line in failures:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    if stray_launch_variables():
        print(f"warning: {stray_launch_variables()}", file=sys.stderr)
    if _launched_by_torchrun_or_srun():
        from primus_hydra.launch.external import overrides_for_external_launch

        sys.argv += overrides_for_external_launch(sys.argv[1:])
    # Let composition errors reach us instead of Hydra's multi-line report, so that we can print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    printing = any(word.partition("=")[0] in INFO_FLAGS for word in sys.argv[1:])  # --cfg job, --cfg=job
    if not printing:
        warn_about_literal_secrets(sys.argv[1:])
    try:
        with redacted_stdout(sys.argv[1:]) if printing else contextlib.nullcontext():  # `--resolve` would print secrets
            if not _printed_job_config(sys.argv[1:]) and not answered_query(sys.argv[1:]) \
                    and not ran_single_run(sys.argv[1:], _hydra_main.__wrapped__):  # queries and runs take no flag
                _hydra_main()
        _exit_now()
    except BrokenPipeError:  # `... | head -1`: the reader has what it wanted; stop quietly, as a shell tool does
        _discard_stdout()
        sys.exit(128 + signal.SIGPIPE)
    except SweepPointFailed as failed:  # a sweeper gave up on the sweep; the point's line is printed already
        if _USER_WANTS_TRACEBACK:
            raise
        sys.exit(failed.exit_code)
    except PrimusError as error:
        if _USER_WANTS_TRACEBACK:
            raise
        _report(error)
        sys.exit(error.exit_code)
    except Exception as error:
        from primus_hydra.config.error_format import format_compose_error, is_compose_error

        if _USER_WANTS_TRACEBACK or not is_compose_error(error):
            raise
        print(f"error: {format_compose_error(error)}", file=sys.stderr)
        sys.exit(2)
    finally:
        if not _USER_WANTS_TRACEBACK:
            os.environ.pop("HYDRA_FULL_ERROR", None)


def _printed_job_config(args: list[str]) -> bool:
    """`<overrides> --cfg job [-p PACKAGE]` printed as Hydra prints it (Hydra.show_cfg), from the job's config composed
    without Hydra's own (config/job_composition.py); False for any other command line, or where only Hydra's own path
    can compose or print it."""
    request = _job_config_request(args)
    if request is None:
        return False
    overrides, package = request
    cfg = compose_job_config(find_conf_dir(), "config", overrides)
    if cfg is None:
        return False
    if package in (None, "_global_"):
        selected, package = cfg, None
    else:
        try:  # a leaf's interpolation is resolved here, and may need Hydra's config (${hydra:...})
            selected = OmegaConf.select(cfg, package)
        except Exception:  # noqa: BLE001 - Hydra's own path prints it, or words the error
            return False
        if selected is None:
            return False  # Hydra's path says the package is not found
    if not isinstance(selected, Container):
        print(selected)
        return True
    if package is not None:
        print(f"# @package {package}")
    sys.stdout.write(OmegaConf.to_yaml(selected))
    return True


def _job_config_request(args: list[str]) -> Optional[tuple[list[str], Optional[str]]]:
    """The overrides and package (-p) of a command line that is `--cfg job` with no other flag, else None."""
    overrides: list[str] = []
    package = None
    job = False
    words = iter(args)
    for word in words:
        flag, equals, value = word.partition("=")
        if flag in ("--cfg", "-c", "--package", "-p") and word.startswith("-"):
            value = value if equals else next(words, "")
            if flag in ("--cfg", "-c"):
                if value != "job":  # --cfg hydra / all: Hydra's own config is printed
                    return None
                job = True
            else:
                package = value
        elif word.startswith("-"):  # another flag: --resolve, -cd, -m, --info ...
            return None
        else:
            overrides.append(word)
    return (overrides, package) if job else None


def _launched_by_torchrun_or_srun() -> bool:
    return ("RANK" in os.environ and "WORLD_SIZE" in os.environ) or "SLURM_PROCID" in os.environ


def _exit_now() -> None:
    """A command that is done (printed the config, help or a plan, dry-ran, trained, submitted) has nothing left to
    clean up: skip the interpreter's teardown of every module (~30 ms after printing, ~0.1 s after a run, seconds
    after torch) once the log files are closed. Not while another thread still works: its work is waited for."""
    import logging
    import threading

    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.current_thread()):
        return
    logging.shutdown()
    exit_without_teardown(0)


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of the closed pipe raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    main()
