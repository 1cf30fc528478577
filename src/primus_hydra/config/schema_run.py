"""Schemas of the run-level groups: platform, launch, sweep, patches; and the fields every backend option has (each
backend's own schema extends them in backends/<name>/schema.py)."""
from __future__ import annotations

from dataclasses import field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from primus_hydra.config.choices import AUTO, AutoInt, Choice
from primus_hydra.util.records import record


class Device(Choice):
    auto = "auto"  # a GPU when torch sees one, else the CPU
    cpu = "cpu"
    cuda = "cuda"  # ROCm builds of torch report as cuda


class RendezvousBackend(Choice):
    c10d = "c10d"  # restartable
    static = "static"  # fixed node ranks, no restarts


class LaunchMode(Choice):
    srun = "srun"  # one Slurm task per process (each a rank)
    torchrun = "torchrun"  # one Slurm task per node, running torch's elastic agent


@record
class PlatformConfig:
    name: str = MISSING
    env: Dict[str, str] = field(default_factory=dict)  # applied in each worker's runtime with setdefault semantics
    device: Device = Device.auto
    gpus_per_node: AutoInt = AUTO  # auto (detected) or an integer
    peak_tflops_per_device: Optional[float] = None  # dense bf16 peak for MFU; null: measured on CPU, unknown on GPU


@record
class LaunchConfig:
    """How the job's processes start: torch's elastic agent, in the process that composed the config."""

    nproc_per_node: AutoInt = 1  # auto: visible GPUs, else 1 | an integer (>1 on CPU uses gloo)
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: AutoInt = AUTO  # auto: a free port | an integer
    rdzv_backend: RendezvousBackend = RendezvousBackend.c10d
    max_restarts: int = 0  # restart all workers after a failure this many times; they resume from the last checkpoint
    monitor_interval: float = 0.1  # seconds between the agent's health checks of its workers
    timeout_s: float = 600.0  # collective timeout: a stuck rank fails the job after this long
    shutdown_timeout_s: int = 30  # after a failure or signal: seconds from SIGTERM to SIGKILL (time for an on_signal checkpoint)
    allow_oversubscribe: bool = False  # start a job even when the orchestrator's memory estimate exceeds this node's
    # Slurm (platform=slurm / hydra/launcher=primus_slurm); the job's size and queue settings are hydra.launcher.*
    mode: LaunchMode = LaunchMode.srun
    wait: bool = True  # false: return right after submission, printing job ids and run dirs (see task=status)
    freeze_code: bool = True  # Slurm: the job runs a copy of src/ and conf/ made at submission (launch/slurm/frozen_code.py)


@record
class SweepConfig:
    """Multirun points on this machine (hydra/launcher=primus_local)."""

    max_parallel: AutoInt = AUTO  # auto: what the resource plan allows | an integer cap
    probe: bool = False  # run the first point alone for a few steps, measure its peak memory, tighten the plan
    probe_steps: int = 5


@record
class PatchesConfig:
    enabled: str = "all"  # all | none | comma-separated patch ids (PRIMUS_PATCHES overrides when set)
    modules: List[str] = field(default_factory=list)  # extra modules that register patches (imported by the callback)


@record
class BackendConfig:
    """Fields every backend option has; each backend extends it with its own typed knobs."""

    _target_: str = MISSING  # the BackendAdapter class
    name: str = MISSING
    path: Optional[str] = None  # source tree to put on sys.path (then $BACKEND_PATH, third_party/<dir>, cache)
    trainer: Optional[str] = None  # trainer class override; null: the adapter picks one by module.stage
    extra_args: Dict[str, Any] = field(default_factory=dict)  # native arguments passed through as they are
