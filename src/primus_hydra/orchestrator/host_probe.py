"""This process's CPUs and available host memory, honoring the limits a container or Slurm job puts on it.

CPUs: `sched_getaffinity` (the cores Slurm/taskset gave us), trimmed to the cgroup CPU quota (v2 `cpu.max`,
v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`). RAM: `/proc/meminfo` MemAvailable, lowered to the cgroup's headroom
(v2 `memory.max` - (`memory.current` - inactive file cache), v1 `memory.limit_in_bytes` - usage). Every limit
along the cgroup path counts; the tightest wins. Unreadable files mean "no limit known", never a crash.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping, Optional

from primus_hydra.orchestrator.gpu_probe import parse_number_env

GIB = 1024.0 ** 3
UNLIMITED_BYTES = 1 << 60  # cgroup v1 writes a huge number for "no limit"


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_dirs(cgroup_root: Path, proc_root: Path, controller: Optional[str]) -> list[Path]:
    """The cgroup folders that limit this process, innermost first: its own path (from /proc/self/cgroup) and
    each parent up to the mount root. Inside a container the path may not exist under the mount: the root is used."""
    base = cgroup_root if controller is None else cgroup_root / controller
    relative = ""
    for line in (_read(proc_root / "self" / "cgroup") or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        wanted = controllers == "" if controller is None else controller in controllers.split(",")
        if wanted:
            relative = path.strip("/")
            break
    dirs = []
    current = base / relative if relative else base
    if not current.is_dir():
        current = base
    while True:
        dirs.append(current)
        if current == base or base not in current.parents:
            break
        current = current.parent
    return dirs


def cgroup_cpu_quota(cgroup_root: Path, proc_root: Path) -> Optional[float]:
    quotas = []
    for folder in _cgroup_dirs(cgroup_root, proc_root, None):
        fields = (_read(folder / "cpu.max") or "").split()
        if len(fields) == 2 and fields[0] != "max":
            quota, period = _float(fields[0]), _float(fields[1])
            if quota and period:
                quotas.append(quota / period)
    for controller in ("cpu,cpuacct", "cpu"):
        for folder in _cgroup_dirs(cgroup_root, proc_root, controller):
            quota, period = _float(_read(folder / "cpu.cfs_quota_us")), _float(_read(folder / "cpu.cfs_period_us"))
            if quota and quota > 0 and period:
                quotas.append(quota / period)
    return min(quotas) if quotas else None


def cgroup_memory_headroom_bytes(cgroup_root: Path, proc_root: Path) -> Optional[float]:
    headrooms = []
    for folder in _cgroup_dirs(cgroup_root, proc_root, None):
        limit = _float(_read(folder / "memory.max"))
        current = _float(_read(folder / "memory.current"))
        if limit is not None and current is not None:
            reclaimable = _stat_field(folder / "memory.stat", "inactive_file")
            headrooms.append(limit - max(0.0, current - reclaimable))
    for folder in _cgroup_dirs(cgroup_root, proc_root, "memory"):
        limit = _float(_read(folder / "memory.limit_in_bytes"))
        usage = _float(_read(folder / "memory.usage_in_bytes"))
        if limit is not None and usage is not None and limit < UNLIMITED_BYTES:
            reclaimable = _stat_field(folder / "memory.stat", "total_inactive_file")
            headrooms.append(limit - max(0.0, usage - reclaimable))
    return max(0.0, min(headrooms)) if headrooms else None


def _stat_field(path: Path, name: str) -> float:
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return _float(value) or 0.0
    return 0.0


def _float(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def meminfo_available_bytes(proc_root: Path) -> Optional[float]:
    for line in (_read(proc_root / "meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            kib = _float(line.split()[1])
            return None if kib is None else kib * 1024.0
    return None


def detect_cpus(environ: Mapping[str, str], cgroup_root: Path, proc_root: Path) -> tuple[tuple[int, ...], str]:
    """The CPU ids this process may use (affinity, trimmed to the quota) and where that came from."""
    try:
        affinity = sorted(os.sched_getaffinity(0))
        source = "sched_getaffinity"
    except (AttributeError, OSError):
        affinity, source = list(range(os.cpu_count() or 1)), "os.cpu_count"
    forced = parse_number_env(environ, "PRIMUS_AUTO_VCPUS", integer=True, allow_zero=False)
    if forced is not None:
        count = int(forced)
        ids = affinity[:count] if count <= len(affinity) else list(range(count))
        return tuple(ids), "PRIMUS_AUTO_VCPUS"
    quota = cgroup_cpu_quota(cgroup_root, proc_root)
    if quota is not None and math.ceil(quota) < len(affinity):
        return tuple(affinity[: max(1, math.ceil(quota))]), f"{source}, cgroup cpu quota {quota:g}"
    return tuple(affinity), source


def detect_ram_gib(environ: Mapping[str, str], cgroup_root: Path, proc_root: Path) -> tuple[Optional[float], str]:
    forced = parse_number_env(environ, "PRIMUS_AUTO_RAM_GB")
    if forced is not None:
        return forced, "PRIMUS_AUTO_RAM_GB"
    available = meminfo_available_bytes(proc_root)
    headroom = cgroup_memory_headroom_bytes(cgroup_root, proc_root)
    if headroom is not None and (available is None or headroom < available):
        return headroom / GIB, "cgroup memory limit - usage"
    if available is not None:
        return available / GIB, "/proc/meminfo MemAvailable"
    return None, "unknown"
