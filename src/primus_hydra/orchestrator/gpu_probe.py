"""The GPUs this process may use and their free memory, found without importing torch or initialising CUDA/HIP.

Sources, first match wins: `PRIMUS_AUTO_NUM_GPUS` (stands in for the device listing), `nvidia-smi`, `amd-smi`,
`rocm-smi`. Each tool runs with a timeout; a missing tool, a timeout or unreadable output means "unknown", never
a crash. The visible-devices mask (CUDA_VISIBLE_DEVICES; ROCR_VISIBLE_DEVICES then HIP_VISIBLE_DEVICES) selects
from the listing; without a listing the mask alone says how many GPUs there are. MIG instances are not counted:
`nvidia-smi --query-gpu` lists physical GPUs only.
"""
from __future__ import annotations

import json
import math
import os
from typing import Mapping, Optional

from primus_hydra.errors import ConfigValidationError
from primus_hydra.util.records import record

PROBE_TIMEOUT_S = 5
NO_DEVICE_ENTRIES = ("-1", "none", "void", "nodevfiles")
MIB_PER_GIB = 1024.0


@record(frozen=True)
class GpuInfo:
    index: int  # the id to put in the visible-devices variable (`mask_variable` of MachineResources)
    vendor: str  # nvidia | amd
    free_gib: Optional[float]  # None: unknown


@record(frozen=True)
class _Listed:
    """A device as the vendor tool (or PRIMUS_AUTO_NUM_GPUS) lists it, before the mask is applied."""

    ordinal: int
    uuid: str
    free_gib: Optional[float]


@record(frozen=True)
class GpuDetection:
    gpus: tuple[GpuInfo, ...]
    vendor: Optional[str]
    mask_variable: Optional[str]  # the variable a launcher sets to give a child process some of these GPUs
    absent_mask_entries: tuple[str, ...]  # mask entries that name no listed device (reported by validation)
    source: str  # where the count came from
    free_source: str  # where the free memory came from
    mask_error: Optional[str] = None  # the absent entries as one line


def parse_number_env(environ: Mapping[str, str], name: str, *, integer: bool = False,
                     allow_zero: bool = True) -> Optional[float]:
    """A numeric override from the environment: None when unset; one line naming the variable when invalid."""
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    kind = "an integer" if integer else "a number"
    floor = ">= 0" if allow_zero else "> 0"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ConfigValidationError([f"{name}={raw}: must be {kind} {floor}"]) from None
    if math.isnan(value) or math.isinf(value) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigValidationError([f"{name}={raw}: must be {kind} {floor}"])
    return value


def parse_free_vram_env(environ: Mapping[str, str]) -> Optional[list[float]]:
    raw = environ.get("PRIMUS_AUTO_FREE_VRAM_GB")
    if raw is None or raw.strip() == "":
        return None
    values = []
    for entry in raw.replace(",", " ").split():
        value = parse_number_env({"PRIMUS_AUTO_FREE_VRAM_GB": entry}, "PRIMUS_AUTO_FREE_VRAM_GB")
        values.append(value)
    return values


def run_tool(command: list[str], environ: Mapping[str, str]) -> Optional[str]:
    """A vendor tool's stdout, or None when it is missing, times out or fails (never an exception)."""
    if not _on_path(command[0], environ.get("PATH")):
        return None
    import subprocess  # here: a machine without the tool (a plan on a laptop) never needs it (~2 ms)

    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
                                env=dict(environ))
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def _on_path(command: str, search_path: Optional[str]) -> bool:
    """Whether shutil.which finds `command` on `search_path` (None: this process's PATH; a command with a folder
    part is that file). shutil itself is not imported: with bz2 and lzma it is ~2 ms of every command that probes."""
    if os.path.dirname(command):
        return _runnable(command)
    if search_path is None:
        search_path = os.environ.get("PATH")
        if search_path is None:
            search_path = os.confstr("CS_PATH") if "CS_PATH" in os.confstr_names else os.defpath
    return any(_runnable(os.path.join(folder, command)) for folder in (search_path.split(os.pathsep) if search_path
                                                                       else ()))


def _runnable(path: str) -> bool:
    return os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path)


def _float_or_none(text: str) -> Optional[float]:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def list_nvidia(environ: Mapping[str, str]) -> Optional[list[_Listed]]:
    # The query ignores CUDA_VISIBLE_DEVICES and lists physical GPUs (never MIG instances), which is what the
    # mask refers to.
    output = run_tool(["nvidia-smi", "--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits"], environ)
    if output is None:
        return None
    listed = []
    for line in output.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        free_mib = _float_or_none(fields[2])
        listed.append(_Listed(int(fields[0]), fields[1], None if free_mib is None else free_mib / MIB_PER_GIB))
    return listed or None


def _amd_free_gib(entry: dict) -> Optional[float]:
    usage = entry.get("mem_usage") or entry.get("usage") or entry
    free = usage.get("free_vram") if isinstance(usage, dict) else None
    if isinstance(free, dict):
        value = _float_or_none(free.get("value"))
        unit = str(free.get("unit", "MB")).upper()
        if value is None:
            return None
        return value / (1024.0 ** 3) if unit == "B" else value / (MIB_PER_GIB * 1024.0) if unit == "KB" else (
            value if unit == "GB" else value / MIB_PER_GIB)
    return None


def run_tool_json(command: list[str], environ: Mapping[str, str]):
    output = run_tool(command, environ)
    try:
        return None if output is None else json.loads(output)
    except ValueError:
        return None


def list_amd_smi(environ: Mapping[str, str]) -> Optional[list[_Listed]]:
    data = run_tool_json(["amd-smi", "metric", "--mem-usage", "--json"], environ)
    if isinstance(data, dict):  # some releases wrap the list
        data = data.get("gpu_data", [data])
    listed = []
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict) and str(entry.get("gpu", "")).isdigit():
            listed.append(_Listed(int(entry["gpu"]), "", _amd_free_gib(entry)))
    return listed or None


def list_rocm_smi(environ: Mapping[str, str]) -> Optional[list[_Listed]]:
    data = run_tool_json(["rocm-smi", "--showmeminfo", "vram", "--json"], environ)
    listed = []
    for card, fields in data.items() if isinstance(data, dict) else []:
        if not (card.startswith("card") and card[4:].isdigit() and isinstance(fields, dict)):
            continue
        total = _float_or_none(fields.get("VRAM Total Memory (B)"))
        used = _float_or_none(fields.get("VRAM Total Used Memory (B)"))
        free = None if total is None or used is None else max(0.0, total - used) / 1024.0 ** 3
        listed.append(_Listed(int(card[4:]), "", free))
    return sorted(listed, key=lambda device: device.ordinal) or None


def _mask_entries(mask: str) -> list[str]:
    entries = [entry.strip() for entry in mask.split(",") if entry.strip()]
    if not entries or entries[0].lower() in NO_DEVICE_ENTRIES:
        return []
    return entries


def _select(listed: Optional[list[_Listed]], entries: list[str]) -> tuple[list[_Listed], list[str]]:
    """The listed devices the mask names, in mask order, and the entries that name none of them."""
    if listed is None:  # no listing: the mask is authoritative, memory unknown
        return [_Listed(int(e) if e.isdigit() else position, e, None) for position, e in enumerate(entries)], []
    chosen, absent = [], []
    for entry in entries:
        match = [d for d in listed if (entry.isdigit() and d.ordinal == int(entry)) or (d.uuid and d.uuid.startswith(entry))]
        if match:
            chosen.append(match[0])
        else:
            absent.append(entry)
    return chosen, absent


def detect_gpus(environ: Mapping[str, str]) -> GpuDetection:
    amd_masks = [name for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES") if name in environ]
    forced = parse_number_env(environ, "PRIMUS_AUTO_NUM_GPUS", integer=True)
    listed, vendor, source = None, None, "none found"
    if forced is not None:
        vendor = "amd" if amd_masks and "CUDA_VISIBLE_DEVICES" not in environ else "nvidia"
        listed, source = [_Listed(i, "", None) for i in range(int(forced))], "PRIMUS_AUTO_NUM_GPUS"
    else:
        for name, lister in (("nvidia", list_nvidia), ("amd", list_amd_smi), ("amd", list_rocm_smi)):
            listed = lister(environ)
            if listed is not None:
                vendor, source = name, {list_nvidia: "nvidia-smi", list_amd_smi: "amd-smi", list_rocm_smi: "rocm-smi"}[lister]
                break
    if vendor is None:  # no tool answered: a mask still says how many devices this process sees
        vendor = "amd" if amd_masks and "CUDA_VISIBLE_DEVICES" not in environ else "nvidia"
    absent: list[str] = []
    listing = (source, sorted(d.ordinal for d in listed)) if listed is not None else None
    mask_variable = "CUDA_VISIBLE_DEVICES" if vendor == "nvidia" else "HIP_VISIBLE_DEVICES"
    if vendor == "nvidia" and "CUDA_VISIBLE_DEVICES" in environ:
        listed, absent = _select(listed, _mask_entries(environ["CUDA_VISIBLE_DEVICES"]))
        source = f"CUDA_VISIBLE_DEVICES over {source}"
    elif vendor == "amd" and amd_masks:
        # ROCR selects physical devices; HIP then indexes into what ROCR left. A child's HIP_VISIBLE_DEVICES is
        # read the same way, so ids are positions in the ROCR selection.
        if "ROCR_VISIBLE_DEVICES" in environ:
            listed, absent = _select(listed, _mask_entries(environ["ROCR_VISIBLE_DEVICES"]))
            listed = [_Listed(position, d.uuid, d.free_gib) for position, d in enumerate(listed)]
        if "HIP_VISIBLE_DEVICES" in environ:
            listed, more = _select(listed, _mask_entries(environ["HIP_VISIBLE_DEVICES"]))
            absent += more
        source = f"{'+'.join(amd_masks)} over {source}"
    listed = listed or []
    free_source = source if any(d.free_gib is not None for d in listed) else "unknown"
    free_override = parse_free_vram_env(environ)
    if free_override is not None and listed:
        if len(free_override) == 1:
            free = free_override * len(listed)
        elif forced is not None and len(free_override) == int(forced):  # one value per listed (physical) GPU
            free = [free_override[d.ordinal] if d.ordinal < len(free_override) else None for d in listed]
        elif len(free_override) == len(listed):
            free = free_override
        else:
            raise ConfigValidationError([
                f"PRIMUS_AUTO_FREE_VRAM_GB has {len(free_override)} values for {len(listed)} visible GPU(s); "
                f"give one value, or one per GPU"
            ])
        listed = [_Listed(d.ordinal, d.uuid, f) for d, f in zip(listed, free)]
        free_source = "PRIMUS_AUTO_FREE_VRAM_GB"
    gpus = tuple(GpuInfo(d.ordinal, vendor, d.free_gib) for d in listed)
    error = None
    if absent and listing is not None:
        masks = " ".join(f"{name}={environ[name]}" for name in ("CUDA_VISIBLE_DEVICES", *amd_masks)
                         if name in environ and (name == "CUDA_VISIBLE_DEVICES") == (vendor == "nvidia"))
        error = (f"{masks} names device(s) {', '.join(absent)} that this machine does not have; "
                 f"{listing[0]} lists {len(listing[1])} GPU(s): {', '.join(map(str, listing[1])) or 'none'}")
    return GpuDetection(gpus, vendor if gpus else None, mask_variable if gpus else None, tuple(absent), source,
                        free_source, error)


def _nvidia_first(field: str, environ: Mapping[str, str]) -> Optional[str]:
    """nvidia-smi's value of one --query-gpu field for the first GPU, or None."""
    output = run_tool(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], environ)
    values = [line.strip() for line in (output or "").splitlines() if line.strip()]
    return values[0] if values else None


def _amd_smi_static_first(section: str, key: str, environ: Mapping[str, str]) -> Optional[str]:
    """amd-smi static's `<section>.<key>` for the first GPU that has it (some releases wrap the list), or None."""
    data = run_tool_json(["amd-smi", "static", f"--{section}", "--json"], environ)
    entries = data.get("gpu_data", [data]) if isinstance(data, dict) else data if isinstance(data, list) else []
    for entry in entries:
        fields = entry.get(section) if isinstance(entry, dict) else None
        if isinstance(fields, dict) and fields.get(key):
            return str(fields[key])
    return None


def detect_gpu_model(environ: Mapping[str, str]) -> Optional[str]:
    """The product name of this machine's first GPU as its vendor tool reports it (`NVIDIA H100 80GB HBM3`,
    `AMD Instinct MI300X`), or None when no tool answers. `PRIMUS_AUTO_GPU_MODEL` stands in for the tools."""
    forced = environ.get("PRIMUS_AUTO_GPU_MODEL", "").strip()
    if forced:
        return forced
    name = _nvidia_first("name", environ) or _amd_smi_static_first("asic", "market_name", environ)
    if name:
        return name
    data = run_tool_json(["rocm-smi", "--showproductname", "--json"], environ)
    for card, fields in data.items() if isinstance(data, dict) else []:
        if card.startswith("card") and isinstance(fields, dict):
            name = fields.get("Card Series") or fields.get("Card series") or fields.get("Card Model")
            if name:
                return str(name)
    return None


def detect_gpu_driver(environ: Mapping[str, str]) -> Optional[str]:
    """The GPU driver's version as the vendor tool reports it, or None when no tool answers."""
    version = _nvidia_first("driver_version", environ) or _amd_smi_static_first("driver", "version", environ)
    if version:
        return version
    data = run_tool_json(["rocm-smi", "--showdriverversion", "--json"], environ)
    system = data.get("system") if isinstance(data, dict) else None
    if isinstance(system, dict) and system.get("Driver version"):
        return str(system["Driver version"])
    return None
