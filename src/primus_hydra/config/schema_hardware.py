"""The `hardware/` group: what one accelerator of a cluster can do, for task=projection (and preflight's targets).

Numbers are per device and dense (no sparsity). Bandwidths are GB/s (1e9 bytes per second) in one direction:
`intra_node_bandwidth_gbps` is what one device can send to its peers inside a node (NVLink, Infinity Fabric),
`inter_node_bandwidth_gbps` what it can send out of the node (its share of the node's NICs). `null` means
"measure it here" (the cpu entry) or "not known" (fp8 on a device without it). HARDWARE_RANGES says what each
number may be; task=projection refuses anything else when it prepares the job (projection/hardware.py).
"""
from __future__ import annotations

from dataclasses import field
from typing import List, NamedTuple, Optional

from omegaconf import MISSING

from primus_hydra.util.records import record


@record
class HardwareConfig:
    name: str = MISSING  # auto: the detected GPU model's entry (cpu when no GPU is visible)
    vendor: str = "unknown"  # amd | nvidia | cpu
    matches: List[str] = field(default_factory=list)  # names the vendor tool reports that select this entry under auto
    memory_gib: Optional[float] = None  # device memory (GiB); null: the host's available memory over the job's ranks
    peak_tflops_bf16: Optional[float] = None  # dense bf16 TFLOP/s; null: measured (cpu)
    peak_tflops_fp8: Optional[float] = None
    peak_tflops_fp32: Optional[float] = None  # dense fp32 (no TF32); what module.precision=fp32 runs at
    memory_bandwidth_gbps: Optional[float] = None  # HBM (or DRAM) GB/s
    intra_node_bandwidth_gbps: Optional[float] = None  # per device, one direction
    intra_node_latency_us: Optional[float] = None  # a small collective step inside a node
    inter_node_bandwidth_gbps: Optional[float] = None  # per device, one direction (its NIC share)
    inter_node_latency_us: Optional[float] = None
    # what the step-time model assumes a real training step achieves (calibrated: docs/projection.md)
    matmul_efficiency: float = 0.7  # fraction of the dense peak large GEMMs reach
    attention_efficiency: float = 0.5  # fraction of the dense peak the attention kernel reaches
    usable_memory_fraction: float = 0.95  # the margin `fits` keeps (allocator, fragmentation)
    # host-side cost of one counted eager op (projection/host_ops.py; on GPUs it hides behind asynchronous
    # execution: 0), and of one op on DTensors (tensor parallelism, FSDP2's sharded parameters). null: measured,
    # one bare op's dispatch (backends/common/metrics.py measure_op_dispatch_us) x op_dispatches / dtensor_op_dispatches
    op_overhead_us: Optional[float] = 0.0
    dtensor_op_overhead_us: Optional[float] = 0.0
    op_dispatches: float = 1.0
    dtensor_op_dispatches: float = 1.0
    overlaps_communication: bool = True  # false: collectives take the cores compute needs (the CPU), nothing hides
    runtime_overhead_gib: float = 0.0  # per device, outside the model: CUDA/HIP context, NCCL/RCCL buffers, GEMM workspaces


class Allowed(NamedTuple):
    low: float
    high: float
    unit: str


# What each number may be, both ends included. The step-time model divides by every peak, bandwidth and efficiency,
# so 0 is a ZeroDivisionError and a negative value a negative throughput; a tiny positive one (1e-320) overflows
# to an infinite step time, a huge one (1e300 TFLOP/s) to a step of 0 s. The ends are far outside any device ever
# built (1 GFLOP/s .. 1 EFLOP/s, 1 MB/s .. 1 PB/s, latencies up to 10 s), so they only refuse typos and nonsense,
# and every projection inside them stays finite. Efficiencies and the memory margin are fractions of a whole.
_PEAK = Allowed(1e-3, 1e6, "TFLOP/s")
_BANDWIDTH = Allowed(1e-3, 1e6, "GB/s")
_LATENCY = Allowed(0.0, 1e7, "us")
_FRACTION = Allowed(0.01, 1.0, "(a fraction)")
HARDWARE_RANGES = {
    "memory_gib": Allowed(1e-3, 1e6, "GiB"),
    "peak_tflops_bf16": _PEAK, "peak_tflops_fp8": _PEAK, "peak_tflops_fp32": _PEAK,
    "memory_bandwidth_gbps": _BANDWIDTH, "intra_node_bandwidth_gbps": _BANDWIDTH, "inter_node_bandwidth_gbps": _BANDWIDTH,
    "intra_node_latency_us": _LATENCY, "inter_node_latency_us": _LATENCY,
    "matmul_efficiency": _FRACTION, "attention_efficiency": _FRACTION, "usable_memory_fraction": _FRACTION,
    "op_overhead_us": Allowed(0.0, 1e6, "us"), "dtensor_op_overhead_us": Allowed(0.0, 1e6, "us"),
    "op_dispatches": Allowed(0.0, 1e4, "dispatches per op"), "dtensor_op_dispatches": Allowed(0.0, 1e4, "dispatches per op"),
    "runtime_overhead_gib": Allowed(0.0, 1e6, "GiB"),
}
PEAK_RANGE = _PEAK  # platform.peak_tflops_per_device replaces the entry's peak: the same range


def out_of_range(key: str, value: float, allowed: Allowed) -> Optional[str]:
    """`key=value: must be ...` when value is outside `allowed` (NaN included), else None."""
    if allowed.low <= value <= allowed.high:
        return None
    return f"{key}={shown(value)}: must be between {shown(allowed.low)} and {shown(allowed.high)} {allowed.unit}"


def shown(value: float) -> str:
    """A number as a user types it: 0 (not 0.0), 1e-320, nan."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def hardware_number_failures(entry, prefix: str = "hardware", where: str = "") -> list[str]:
    """One line per number of a hardware entry (a config node or a dict) outside HARDWARE_RANGES; `null` passes
    where the schema allows it (the resolver says when a null number is needed)."""
    failures = []
    for key, allowed in HARDWARE_RANGES.items():
        value = entry.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        line = out_of_range(f"{prefix}.{key}", float(value), allowed)
        if line:
            failures.append(line + where)
    return failures
