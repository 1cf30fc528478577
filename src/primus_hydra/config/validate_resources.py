"""Rules for the resource knobs and the PRIMUS_AUTO_* overrides: one line each, before any point starts.

Registered with validate.py's @rule (validate.py imports this module at its end). The visible-devices mask is
checked against the devices nvidia-smi / amd-smi / rocm-smi list (when one answers) by the orchestrator only:
inside a launched job each rank's mask comes from its launcher.
"""
from __future__ import annotations

import os

from omegaconf import DictConfig

from primus_hydra.config.validate import rule
from primus_hydra.errors import ConfigValidationError

NUMERIC_OVERRIDES = {  # variable: (integer, zero allowed)
    "PRIMUS_AUTO_NUM_GPUS": (True, True),
    "PRIMUS_AUTO_VCPUS": (True, False),
    "PRIMUS_AUTO_RAM_GB": (False, True),
    "PRIMUS_AUTO_PER_JOB_GB": (False, False),
    "PRIMUS_AUTO_JOBS_PER_GPU_HARD_CAP": (True, False),
    "PRIMUS_AUTO_DATALOADER_HARD_CAP": (True, True),
}


def _auto_or_integer(value, minimum: int) -> bool:
    if str(value) == "auto":
        return True
    return not isinstance(value, bool) and str(value).isdigit() and int(value) >= minimum


@rule
def _resource_overrides(cfg: DictConfig, failures: list[str]) -> None:
    from primus_hydra.orchestrator.gpu_probe import parse_free_vram_env, parse_number_env

    for name, (integer, allow_zero) in NUMERIC_OVERRIDES.items():
        try:
            parse_number_env(os.environ, name, integer=integer, allow_zero=allow_zero)
        except ConfigValidationError as error:
            failures.extend(error.failures)
    try:
        parse_free_vram_env(os.environ)
    except ConfigValidationError as error:
        failures.extend(error.failures)
    compile_threads = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    if compile_threads is not None and not _auto_or_integer(compile_threads.strip(), 1):
        failures.append(f"TORCHINDUCTOR_COMPILE_THREADS={compile_threads}: must be 'auto' or an integer >= 1")


@rule
def _sweep(cfg: DictConfig, failures: list[str]) -> None:
    sweep = cfg.get("sweep")
    if sweep is not None and not _auto_or_integer(sweep.max_parallel, 1):
        failures.append(f"sweep.max_parallel={sweep.max_parallel}: must be 'auto' or an integer >= 1")


@rule
def _visible_devices(cfg: DictConfig, failures: list[str]) -> None:
    if "LOCAL_RANK" in os.environ or cfg.platform.device == "cpu" or any(f.startswith("PRIMUS_AUTO_") for f in failures):
        return
    from primus_hydra.orchestrator.resources import detect_resources

    try:
        resources = detect_resources()
    except ConfigValidationError as error:
        failures.extend(line for line in error.failures if line not in failures)
        return
    if resources.mask_error:
        failures.append(resources.mask_error)
