"""Process groups and the device mesh of one job: (pp, dp, tp), tp innermost so that a TP group shares a node.

Also the few collectives the training loop needs on top of torch's parallel wrappers: averaging a logged value
over data-parallel ranks, and the global gradient norm across DTensor/plain parameters and pipeline stages.
"""
from __future__ import annotations

import gc
import math
import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterable, Optional, TypeVar

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from primus_hydra.config.layout import ParallelLayout
from primus_hydra.distributed_env import DistributedEnv
from primus_hydra.errors import PrimusError

T = TypeVar("T")


def resolve_device(requested: str, local_rank: int) -> torch.device:
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise PrimusError("platform.device=cuda but torch sees no GPU (torch.cuda.is_available() is False); use platform.device=cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


@dataclass
class ParallelState:
    """The job's layout as this rank sees it: its mesh, its coordinates and groups."""

    layout: ParallelLayout
    mesh: Optional[DeviceMesh] = None  # only the dimensions larger than 1 (DDP alone needs none)

    def _coordinate(self, dim: str) -> int:
        if self.mesh is not None and dim in self.mesh.mesh_dim_names:
            return self.mesh.get_local_rank(dim)
        if self.mesh is None and getattr(self.layout, dim) > 1:  # the one distributed dimension spans the world
            return dist.get_rank()
        return 0

    def _group(self, dim: str):
        if self.mesh is not None and dim in self.mesh.mesh_dim_names:
            return self.mesh.get_group(dim)
        return None  # the default group (or no group at all)

    @property
    def dp_rank(self) -> int:
        return self._coordinate("dp")

    @property
    def pp_rank(self) -> int:
        return self._coordinate("pp")

    @property
    def dp_group(self):
        return self._group("dp")

    @property
    def pp_group(self):
        return self._group("pp")

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.layout.pp - 1


def all_gather_objects(value: object) -> list:
    """Collective: every rank's `value`, in rank order (one process: [value])."""
    if not dist.is_initialized():
        return [value]
    values: list = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values



def broadcast_from_rank_0(value: T) -> T:
    """Collective: rank 0's `value` on every rank, so that all act on one view (one process: `value`)."""
    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]

def init_parallel_state(layout: ParallelLayout, device: torch.device, dist_env: DistributedEnv, timeout_s: float) -> ParallelState:
    """Join the job's process group (gloo on CPU, NCCL/RCCL on GPU) and build its mesh; one process: no group."""
    state = ParallelState(layout)
    if layout.world_size == 1:
        return state
    join_process_group(device, dist_env, timeout_s)
    # Each mesh dimension is a process group to set up (a full-mesh connect on gloo): build only what is used
    dims = [(name, size) for name, size in (("pp", layout.pp), ("dp", layout.dp), ("tp", layout.tp)) if size > 1]
    if dims != [("dp", layout.dp)] or layout.fsdp:  # DDP over the whole world uses the default group
        state.mesh = init_device_mesh(device.type, tuple(size for _, size in dims), mesh_dim_names=tuple(name for name, _ in dims))
    return state


def set_up_rank(requested_device: str, dist_env: DistributedEnv, timeout_s: float, *,
                group_of_one: bool = False) -> torch.device:
    """This rank's device (the current device on a GPU), then the job's default process group: joined when the job
    has more than one process, or with `group_of_one` (libraries such as megatron-core need a group even then)."""
    device = resolve_device(requested_device, dist_env.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist_env.world_size > 1 or group_of_one:
        join_process_group(device, dist_env, timeout_s)
    return device


def join_process_group(device: torch.device, dist_env: DistributedEnv, timeout_s: float) -> None:
    """The job's default process group (gloo on CPU, NCCL/RCCL on GPU); a one-process job gets a group of one
    (libraries such as megatron-core need a group even then)."""
    if dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=timeout_s)
    if dist_env.world_size == 1:
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        return
    try:
        dist.init_process_group(backend=backend, store=_attempt_store(dist_env, timeout), timeout=timeout,
                                rank=dist_env.rank, world_size=dist_env.world_size)
    except dist.DistStoreError as error:  # a peer never came (a node not started, stray RANK/WORLD_SIZE)
        raise PrimusError(
            f"rank {dist_env.rank} of {dist_env.world_size}: the other ranks did not meet at "
            f"{dist_env.master_addr}:{dist_env.master_port} within launch.timeout_s={timeout_s:g} s "
            f"({str(error).splitlines()[0]}); start every rank, or unset RANK/WORLD_SIZE to run alone") from None


def _attempt_store(dist_env: DistributedEnv, timeout: timedelta) -> dist.Store:
    """The job's key-value store, namespaced by restart attempt. The elastic agent keeps one store across
    restarts, so a restarted rank could otherwise read its peers' addresses from the failed attempt."""
    use_agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    store = dist.TCPStore(
        host_name=dist_env.master_addr, port=dist_env.master_port, world_size=dist_env.world_size,
        is_master=not use_agent_store and dist_env.rank == 0, timeout=timeout, multi_tenant=not use_agent_store,
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or "0"
    return dist.PrefixStore(f"primus/attempt_{attempt}", store)


def destroy_parallel_state() -> None:
    """Leave the job's process group cleanly.

    torch 2.13 + gloo can deadlock when the last reference to a process group is dropped from Python: the
    destructor joins gloo's worker thread while holding the GIL, and that thread may still be destroying a
    finished collective whose tensors need the GIL. A barrier, a collection of our references and a short
    GIL-free pause let gloo's thread finish before the group is destroyed. The collection reaches what the
    runtime froze after set-up (the model, its wrappers, a library's trainer: util/collector.py) too."""
    if not dist.is_initialized():
        return
    dist.barrier()
    gc.unfreeze()
    gc.collect()
    time.sleep(0.05)
    dist.destroy_process_group()


def reshard_after_forward_only(modules) -> None:
    """FSDP2 leaves the root module's parameters gathered after a forward with no backward (an evaluation): shard
    them again, so that the optimizer and the checkpoint see the sharded parameters they were built on."""
    from torch.distributed.fsdp import FSDPModule

    for module in modules:
        for part in module.modules():
            if isinstance(part, FSDPModule):
                part.reshard()


def mean_over_data_parallel(value: torch.Tensor, state: ParallelState) -> torch.Tensor:
    """The batch mean of a per-rank mean (every DP rank sees the same number of tokens)."""
    if state.layout.dp == 1:
        return value
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM, group=state.dp_group)
    return value / state.layout.dp


def sum_over_pipeline(value: torch.Tensor, state: ParallelState) -> torch.Tensor:
    if state.layout.pp == 1:
        return value
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM, group=state.pp_group)
    return value


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float, state: ParallelState) -> float:
    """Global L2 norm of all gradients (sharded DTensors, replicated plain tensors, every pipeline stage), then
    clip in place. Returns the norm before clipping, as a float (the same on every rank)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    # DTensor exists only if a layout imported torch.distributed.tensor (TP, FSDP2); DDP and one process never do
    DTensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", ())
    by_mesh: dict = {}  # with TP + FSDP, norms are sharded on the 2-D mesh while TP weights are on (dp, tp)
    for grad in grads:
        if isinstance(grad, DTensor):
            by_mesh.setdefault(grad.device_mesh, []).append(grad)
    local = [g for g in grads if not isinstance(g, DTensor)]
    squared = torch.zeros((), dtype=torch.float32, device=grads[0].device if grads else "cpu")
    for sharded in by_mesh.values():
        norm = torch.nn.utils.get_total_norm(sharded, foreach=False)
        squared = squared + norm.full_tensor().float() ** 2
    if local:
        squared = squared + torch.nn.utils.get_total_norm(local, foreach=False).float() ** 2
    total = math.sqrt(sum_over_pipeline(squared, state).item())
    if max_norm > 0 and total > max_norm:
        scale = max_norm / (total + 1e-6)
        for grad in grads:
            grad.mul_(scale)
    return total
