"""The checks that read this machine: the PRIMUS_AUTO_* overrides, the thread variables, TORCHINDUCTOR_COMPILE_THREADS,
the visible-devices mask against the devices nvidia-smi / amd-smi / rocm-smi list, and whether launch.master_addr
resolves. One line each, before the plan.

The mask is checked by the process that launches the job only: inside a launched job each rank's mask comes from
its launcher.
"""
from __future__ import annotations

import os
from typing import Mapping

from omegaconf import DictConfig

from primus_hydra.config.choices import auto_int_failure
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.gpu_probe import parse_free_vram_env, parse_number_env
from primus_hydra.orchestrator.plan import THREAD_VARIABLES
from primus_hydra.orchestrator.resources import detect_resources

NUMERIC_OVERRIDES = {  # variable: (integer, zero allowed)
    "PRIMUS_AUTO_NUM_GPUS": (True, True),
    "PRIMUS_AUTO_VCPUS": (True, False),
    "PRIMUS_AUTO_RAM_GB": (False, True),
    "PRIMUS_AUTO_PER_JOB_GB": (False, False),
    "PRIMUS_AUTO_JOBS_PER_GPU_HARD_CAP": (True, False),
    "PRIMUS_AUTO_DATALOADER_HARD_CAP": (True, True),
}


def override_failures(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The resource overrides a user exported, each checked (one line per bad variable)."""
    failures: list[str] = []
    for name, (integer, allow_zero) in NUMERIC_OVERRIDES.items():
        try:
            parse_number_env(environ, name, integer=integer, allow_zero=allow_zero)
        except ConfigValidationError as error:
            failures.extend(error.failures)
    try:
        parse_free_vram_env(environ)
    except ConfigValidationError as error:
        failures.extend(error.failures)
    for name in THREAD_VARIABLES:  # OpenMP would ignore a bad value and run with every core
        value = environ.get(name)
        if value is not None and not (value.strip().isdigit() and int(value) >= 1):
            failures.append(f"{name}={value}: must be an integer >= 1 (threads per process), or unset for the plan's")
    compile_threads = environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    if compile_threads is not None:
        failure = auto_int_failure("TORCHINDUCTOR_COMPILE_THREADS", compile_threads.strip(), 1)
        if failure:
            failures.append(failure)
    return failures


def visible_devices_failures(cfg: DictConfig) -> list[str]:
    """A CUDA_/HIP_/ROCR_VISIBLE_DEVICES entry that names no device of this machine (when a vendor tool lists them)."""
    if cfg.platform.device == "cpu":
        return []

    try:
        resources = detect_resources()
    except ConfigValidationError as error:
        return list(error.failures)
    return [resources.mask_error] if resources.mask_error else []


def master_address_failures(cfg: DictConfig) -> list[str]:
    """launch.master_addr resolves here (the agents meet there; a typo would otherwise end in a traceback)."""
    import socket

    address = str(cfg.launch.master_addr).strip()
    if not address:
        return ["launch.master_addr is empty; give the first node's host name or address (127.0.0.1 on one node)"]
    try:
        socket.getaddrinfo(address, None)
    except (OSError, UnicodeError) as error:
        return [f"launch.master_addr={address} does not resolve on this machine ({error.__class__.__name__}: "
                f"{getattr(error, 'strerror', None) or error}); give the first node's host name or address"]
    return []
