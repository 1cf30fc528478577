"""The `hardware/` group: what one accelerator of a cluster can do, for task=projection (and preflight's targets).

Numbers are per device and dense (no sparsity). Bandwidths are GB/s (1e9 bytes per second) in one direction:
`intra_node_bandwidth_gbps` is what one device can send to its peers inside a node (NVLink, Infinity Fabric),
`inter_node_bandwidth_gbps` what it can send out of the node (its share of the node's NICs). `null` means
"measure it here" (the cpu entry) or "not known" (fp8 on a device without it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from omegaconf import MISSING


@dataclass
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
    # one bare op's dispatch (backends/torch/metrics.py measure_op_dispatch_us) x op_dispatches / dtensor_op_dispatches
    op_overhead_us: Optional[float] = 0.0
    dtensor_op_overhead_us: Optional[float] = 0.0
    op_dispatches: float = 1.0
    dtensor_op_dispatches: float = 1.0
    overlaps_communication: bool = True  # false: collectives take the cores compute needs (the CPU), nothing hides
    runtime_overhead_gib: float = 0.0  # per device, outside the model: CUDA/HIP context, NCCL/RCCL buffers, GEMM workspaces
