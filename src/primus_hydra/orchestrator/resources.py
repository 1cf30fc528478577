"""What this machine gives this process: visible GPUs and their free memory, CPUs, available host RAM.

Found without importing torch or initialising CUDA/HIP (gpu_probe.py, host_probe.py). Overrides for tests and
restricted launchers: PRIMUS_AUTO_NUM_GPUS, PRIMUS_AUTO_FREE_VRAM_GB (one value or one per GPU),
PRIMUS_AUTO_VCPUS, PRIMUS_AUTO_RAM_GB. Detection with the process's own environment is cached (one probe of
each tool per process, shared by validation and the plan).
"""
from __future__ import annotations

import functools
import os
from dataclasses import field
from pathlib import Path
from typing import Mapping, Optional

from primus_hydra.config.choices import auto_int
from primus_hydra.orchestrator.gpu_probe import GpuInfo, detect_gpus
from primus_hydra.orchestrator.host_probe import detect_cpus, detect_ram_gib
from primus_hydra.util.records import record

__all__ = ["GpuInfo", "MachineResources", "detect_resources", "nproc_for"]

# The variables detection reads: the cache key of detect_resources() for the process environment.
DETECTION_VARIABLES = ("PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                       "PRIMUS_AUTO_NUM_GPUS", "PRIMUS_AUTO_FREE_VRAM_GB", "PRIMUS_AUTO_VCPUS", "PRIMUS_AUTO_RAM_GB")


@record(frozen=True)
class MachineResources:
    gpus: tuple[GpuInfo, ...]
    vcpus: int
    cpu_ids: tuple[int, ...]
    ram_available_gib: Optional[float]
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    mask_variable: Optional[str] = None  # CUDA_VISIBLE_DEVICES | HIP_VISIBLE_DEVICES: where GpuInfo.index goes
    absent_mask_entries: tuple[str, ...] = ()  # visible-devices entries naming no device of this machine
    mask_error: Optional[str] = None  # the one line validation reports for them

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def to_dict(self) -> dict:
        return {
            "gpus": [{"index": g.index, "vendor": g.vendor, "free_gib": _round(g.free_gib)} for g in self.gpus],
            "vcpus": self.vcpus,
            "cpu_ids": list(self.cpu_ids),
            "ram_available_gib": _round(self.ram_available_gib),
            "mask_variable": self.mask_variable,
            "absent_mask_entries": list(self.absent_mask_entries),
            "sources": dict(self.sources),
        }


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 2)


def detect_resources(environ: Mapping[str, str] = os.environ, *, cgroup_root: Path | str = "/sys/fs/cgroup",
                     proc_root: Path | str = "/proc") -> MachineResources:
    """This process's resources. Bad PRIMUS_AUTO_* values raise ConfigValidationError (one line)."""
    if environ is os.environ and str(cgroup_root) == "/sys/fs/cgroup" and str(proc_root) == "/proc":
        return _detect_cached(tuple((name, os.environ.get(name)) for name in DETECTION_VARIABLES))
    return _detect(environ, Path(cgroup_root), Path(proc_root))


@functools.lru_cache(maxsize=8)
def _detect_cached(key: tuple) -> MachineResources:
    return _detect(os.environ, Path("/sys/fs/cgroup"), Path("/proc"))


def _detect(environ: Mapping[str, str], cgroup_root: Path, proc_root: Path) -> MachineResources:
    gpus = detect_gpus(environ)
    cpu_ids, cpu_source = detect_cpus(environ, cgroup_root, proc_root)
    ram, ram_source = detect_ram_gib(environ, cgroup_root, proc_root)
    sources = {"gpus": gpus.source, "free_vram": gpus.free_source, "vcpus": cpu_source, "ram": ram_source}
    return MachineResources(gpus.gpus, len(cpu_ids), cpu_ids, ram, sources, gpus.mask_variable,
                            gpus.absent_mask_entries, gpus.mask_error)


def nproc_for(value, device: str, num_gpus: int) -> int:
    """launch.nproc_per_node: an explicit integer wins; auto = the GPUs (unless platform.device=cpu), else 1."""
    explicit = auto_int(value)
    if explicit is not None:
        return explicit
    return (num_gpus if device != "cpu" else 0) or 1
