"""The device a projection is made for: a `hardware/` entry, `auto` resolved from the detected GPU model, and
the cpu entry's measured matmul peak (at the job's threads per rank)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.schema_hardware import HARDWARE_RANGES, PEAK_RANGE, HardwareConfig, out_of_range
from primus_hydra.errors import ConfigValidationError
from primus_hydra.util.records import record

REQUIRED = ("memory_bandwidth_gbps", "intra_node_bandwidth_gbps", "intra_node_latency_us",
            "inter_node_bandwidth_gbps", "inter_node_latency_us")
GIB = 1024.0 ** 3


@record(frozen=True)
class Hardware:
    name: str
    vendor: str
    memory_gib: float
    peak_tflops: float  # dense, at the run's precision
    peak_source: str  # where peak_tflops comes from (the entry, or a measurement)
    memory_bandwidth_gbps: float
    intra_node_bandwidth_gbps: float
    intra_node_latency_us: float
    inter_node_bandwidth_gbps: float
    inter_node_latency_us: float
    matmul_efficiency: float
    attention_efficiency: float
    usable_memory_fraction: float
    runtime_overhead_gib: float = 0.0
    op_overhead_us: float = 0.0
    dtensor_op_overhead_us: float = 0.0
    overlaps_communication: bool = True

    @property
    def usable_memory_gib(self) -> float:
        return self.memory_gib * self.usable_memory_fraction

    @property
    def device_word(self) -> str:
        """What one rank runs on, as the report names it: a GPU, or on the cpu entry a rank (a process sharing the
        host's cores and memory with the node's other ranks)."""
        return {"nvidia": "GPU", "amd": "GPU", "cpu": "rank"}.get(self.vendor, "device")


def hardware_entries() -> list[str]:
    return sorted(path.stem for path in (Path(find_conf_dir()) / "hardware").glob("*.yaml"))


def load_entry(name: str) -> Any:
    """conf/hardware/<name>.yaml merged over the schema (a file read, no composition), read-only: read once per
    process and version of the file (a projection asks for its entry three times, ~3 ms each)."""
    path = Path(find_conf_dir()) / "hardware" / f"{name}.yaml"
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _ENTRIES:
        data = OmegaConf.load(path)
        with_defaults = OmegaConf.masked_copy(data, [field for field in data.keys() if field != "defaults"])
        entry = OmegaConf.merge(OmegaConf.structured(HardwareConfig), with_defaults)
        OmegaConf.set_readonly(entry, True)
        _ENTRIES[key] = entry
    return _ENTRIES[key]


_ENTRIES: dict[tuple[str, int], Any] = {}


def entry_for_gpu_model(model_name: Optional[str]) -> str:
    """The hardware entry whose `matches` names the detected GPU model; cpu when there is none."""
    if model_name is None:
        return "cpu"
    wanted = model_name.upper().replace(" ", "")
    for name in hardware_entries():
        if name == "auto":
            continue
        if any(match.upper().replace(" ", "") in wanted for match in load_entry(name).matches):
            return name
    known = ", ".join(n for n in hardware_entries() if n not in ("auto", "cpu"))
    raise ConfigValidationError([f"hardware=auto: the detected GPU '{model_name}' has no hardware/ entry ({known}); "
                                 f"choose one with hardware=<name> or add conf/hardware/<name>.yaml"])


def resolve_hardware(entry: Any, *, precision: str, threads_per_rank: int, host_memory_gib: float,
                     ranks_per_node: int, platform_peak: Optional[float] = None,
                     fresh_measurement: bool = False) -> Hardware:
    """A hardware entry (a named one: `auto` is resolved by the caller, entry_for_gpu_model) as numbers; null
    numbers are measured (cpu: the matmul peak, one op's dispatch, host memory shared by the node's ranks). platform_peak
    (platform.peak_tflops_per_device) replaces the entry's peak, as it does for the trainers' MFU.
    fresh_measurement: measure the CPU peak now instead of reading the cache (a calibration compares the projection
    with a run made under this moment's load)."""
    missing = [key for key in REQUIRED if entry.get(key) is None]
    if missing:
        raise ConfigValidationError([f"hardware.{key}=null: the hardware entry '{entry.name}' must give it" for key in missing])
    peak_key = {"bf16": "peak_tflops_bf16", "fp8": "peak_tflops_fp8"}.get(precision, "peak_tflops_fp32")
    peak, source = entry.get(peak_key), f"hardware.{peak_key}"
    if platform_peak is not None:
        peak, source = float(platform_peak), "platform.peak_tflops_per_device"
    dispatch = None
    if peak is None or entry.op_overhead_us is None or entry.dtensor_op_overhead_us is None:
        if entry.vendor != "cpu":
            raise ConfigValidationError([f"hardware.{peak_key}, op_overhead_us, dtensor_op_overhead_us: the entry "
                                         f"'{entry.name}' must give them (only the cpu entry is measured)"])
        measured_peak, dispatch = measured_cpu(precision, threads_per_rank, fresh=fresh_measurement)
        if peak is None:
            peak, source = measured_peak, f"measured on this CPU at {threads_per_rank} thread(s) per rank"
    op_us = entry.op_overhead_us if entry.op_overhead_us is not None else dispatch * entry.op_dispatches
    dtensor_us = (entry.dtensor_op_overhead_us if entry.dtensor_op_overhead_us is not None
                  else dispatch * entry.dtensor_op_dispatches)
    memory = entry.memory_gib if entry.memory_gib is not None else host_memory_gib / max(1, ranks_per_node)
    bandwidth = float(entry.memory_bandwidth_gbps)
    if entry.vendor == "cpu":  # the cpu entry gives one core's share: a rank streams with all of its threads
        bandwidth *= threads_per_rank
    _check_resolved(entry, peak=float(peak), source=source, memory=float(memory), op_us=float(op_us),
                    dtensor_us=float(dtensor_us))
    return Hardware(
        name=str(entry.name), vendor=str(entry.vendor), memory_gib=float(memory), peak_tflops=float(peak),
        peak_source=source, memory_bandwidth_gbps=bandwidth,
        intra_node_bandwidth_gbps=float(entry.intra_node_bandwidth_gbps),
        intra_node_latency_us=float(entry.intra_node_latency_us),
        inter_node_bandwidth_gbps=float(entry.inter_node_bandwidth_gbps),
        inter_node_latency_us=float(entry.inter_node_latency_us), matmul_efficiency=float(entry.matmul_efficiency),
        attention_efficiency=float(entry.attention_efficiency), usable_memory_fraction=float(entry.usable_memory_fraction),
        runtime_overhead_gib=float(entry.runtime_overhead_gib), op_overhead_us=float(op_us),
        dtensor_op_overhead_us=float(dtensor_us), overlaps_communication=bool(entry.overlaps_communication),
    )


def _check_resolved(entry: Any, *, peak: float, source: str, memory: float, op_us: float, dtensor_us: float) -> None:
    """The numbers that did not come from the entry (measured on this CPU, read from the measurement cache, the
    host's memory) in the ranges the entry's own numbers are held to (a stale or damaged cache, a host without
    memory to spare): one line naming where each came from."""
    checks = [(f"the peak ({source})", peak, PEAK_RANGE),
              ("the memory per rank (hardware.memory_gib, or the host's available memory over its ranks)", memory,
               HARDWARE_RANGES["memory_gib"]),
              ("one op's host overhead (hardware.op_overhead_us, or the measured dispatch x op_dispatches)", op_us,
               HARDWARE_RANGES["op_overhead_us"]),
              ("one DTensor op's host overhead (hardware.dtensor_op_overhead_us, or the measured dispatch x "
               "dtensor_op_dispatches)", dtensor_us, HARDWARE_RANGES["dtensor_op_overhead_us"])]
    failures = [line for line in (out_of_range(f"hardware={entry.name}: {what}", value, allowed)
                                  for what, value, allowed in checks) if line]
    if failures:
        raise ConfigValidationError(failures)


OP_DISPATCH = "op_dispatch_us"  # the cache's key for measure_op_dispatch_us


def measured_cpu(precision: str, threads: int, *, fresh: bool = False) -> tuple[float, float]:
    """(matmul peak TFLOP/s, one op's dispatch in us) of this CPU at `threads`: the native trainer's cached
    measurements (backends/cpu_peak_cache.py), measured in a child process (and cached) when missing or when `fresh`
    asks for it, so that this process never imports torch. The best of four 0.25 s windows: a moment's load from
    elsewhere lowers one window, not the peak."""
    from primus_hydra.backends.cpu_peak_cache import cached_peak

    dtype = "torch.bfloat16" if precision == "bf16" else "torch.float32"
    peak = None if fresh else cached_peak(threads, dtype)
    dispatch = None if fresh else cached_peak(threads, OP_DISPATCH)
    if peak is not None and dispatch is not None:
        return peak, dispatch
    code = ("import sys, torch; threads = int(sys.argv[1]); torch.set_num_threads(threads); "
            "from primus_hydra.backends.cpu_peak_cache import store_peak; "
            "from primus_hydra.backends.common.metrics import measure_matmul_peak_tflops, measure_op_dispatch_us; "
            "peak = max(measure_matmul_peak_tflops(torch.device('cpu'), getattr(torch, sys.argv[2][6:])) for _ in range(4)); "
            "dispatch = measure_op_dispatch_us(); "
            f"store_peak(threads, sys.argv[2], peak); store_peak(threads, '{OP_DISPATCH}', dispatch); print(peak, dispatch)")
    print(f"measuring this CPU's {precision} matmul peak and op dispatch at {threads} thread(s) per rank...",
          file=sys.stderr, flush=True)
    import subprocess  # here: a projection from the cached peak never starts one

    result = subprocess.run([sys.executable, "-c", code, str(threads), dtype], capture_output=True, text=True,
                            timeout=300, check=False)
    try:
        peak_text, dispatch_text = result.stdout.strip().splitlines()[-1].split()
        return float(peak_text), float(dispatch_text)
    except (ValueError, IndexError):
        raise ConfigValidationError([f"hardware=cpu: measuring the CPU failed ({result.stderr.strip()[-200:]}); "
                                     f"set platform.peak_tflops_per_device and hardware.op_overhead_us"]) from None
