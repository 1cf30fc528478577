"""The auto-knob formulas, as pure functions of numbers (the seed's rules; tests pin them with its tables).

Memory sizes are GiB. Nothing here reads the machine or the config: plan.py gathers those and calls these.
"""
from __future__ import annotations

import math
from typing import Optional

RESERVE_FRACTION = 0.10  # the shared reserve: max(10 %, a floor) of what is available stays free
DEVICE_RESERVE_MIN_GIB = 1.0
HOST_RESERVE_MIN_GIB = 2.0
DATALOADER_HARD_CAP = 4  # DataLoader children per training process; more rarely helps (the seed's measured wall)
HOST_GIB_PER_PROCESS = 2.0  # host memory of one training process besides its data loader children
HOST_GIB_PER_LOADER = 0.5  # one DataLoader child
ORCHESTRATOR_CORES = 2  # kept free for the orchestrator and the OS when workers are separate processes
COMPILE_THREADS_CAP = 16
WARMUP_COMPILE_THREADS_CAP = 64


def usable_after_reserve(available_gib: float, minimum_reserve_gib: float) -> float:
    """What is left after the shared reserve: reserve = min(available, max(10 % of available, the floor))."""
    reserve = min(available_gib, max(minimum_reserve_gib, RESERVE_FRACTION * available_gib))
    return available_gib - reserve


def jobs_per_device(free_gib: float, per_job_gib: float, hard_cap: Optional[int] = None) -> int:
    """Complete working sets that fit in a device's usable memory; 0 when not even one does. No default cap."""
    if per_job_gib <= 0:
        return 1
    fit = math.floor(usable_after_reserve(free_gib, DEVICE_RESERVE_MIN_GIB) / per_job_gib + 1e-9)
    return min(fit, hard_cap) if hard_cap is not None else fit


def jobs_in_host_memory(ram_gib: Optional[float], per_job_host_gib: float) -> Optional[int]:
    """Jobs whose host memory fits after the host reserve (2 GiB floor); None when RAM is unknown."""
    if ram_gib is None:
        return None
    return math.floor(usable_after_reserve(ram_gib, HOST_RESERVE_MIN_GIB) / per_job_host_gib + 1e-9)


def auto_dataloader_num_workers(processes: int, vcpus: int, ram_gib: Optional[float],
                                hard_cap: int = DATALOADER_HARD_CAP) -> int:
    """DataLoader children per training process: min(hard cap, 2 cores per child, RAM), 0 if any cap is 0."""
    if processes <= 0:
        return 0
    caps = [hard_cap, (vcpus // processes) // 2]
    if ram_gib is not None:
        caps.append(math.floor(max(0.0, ram_gib / processes - HOST_GIB_PER_PROCESS) / HOST_GIB_PER_LOADER))
    return 0 if min(caps) <= 0 else max(1, min(caps))


def threads_per_process(vcpus: int, processes: int, loader_workers: int, *, in_process: bool) -> int:
    """CPU threads of each training process: the cores left after the orchestrator's 2 (none when the run is
    the orchestrator process itself) and the DataLoader children, shared evenly; at least 1."""
    reserved = 0 if in_process else ORCHESTRATOR_CORES
    processes = max(1, processes)
    return max(1, max(vcpus - reserved - processes * loader_workers, processes) // processes)


def compile_threads(vcpus: int, processes: int, *, warmup: bool = False) -> int:
    """TORCHINDUCTOR_COMPILE_THREADS: production min(16, cores / processes); a lone warmup compile min(64, cores)."""
    if warmup:
        return max(1, min(WARMUP_COMPILE_THREADS_CAP, vcpus))
    return max(1, min(COMPILE_THREADS_CAP, vcpus // max(1, processes)))
