"""Does the job fit this machine? The orchestrator's own memory estimate against what it found, before any worker
starts (a job that cannot fit is refused in one line instead of being left to the OOM killer).

On GPUs each rank's working set (orchestrator/working_set.py) must fit in the free memory of its device, and the
host must hold a minimal process per rank; on the CPU the working sets live in host memory, so all the node's
ranks together must fit in the RAM available. The estimate errs high for MoE and low for some kernels, so it
refuses only what is clearly out of reach; a fallback guess (a model it cannot estimate) never refuses.
`launch.allow_oversubscribe=true` lets an expert insist. A job that does not train (task=benchmark, task=preflight)
brings its own MemoryNeed: what it allocates, not what training the configured model would.
"""
from __future__ import annotations

from typing import Optional

from omegaconf import DictConfig

from primus_hydra.orchestrator.plan import ResourcePlan
from primus_hydra.orchestrator.working_set import CONTEXT_OVERHEAD_GIB
from primus_hydra.util.records import record

MIN_HOST_GIB_PER_PROCESS = 0.5  # a training process's own host memory (interpreter, torch, gloo) at the least
SOURCES_THAT_REFUSE = ("estimate", "env", "probe")  # not "fallback": a guess never refuses a job

_INSIST = "set launch.allow_oversubscribe=true to start it anyway"
_FIXES = ("lower module.micro_batch_size or module.seq_length, shard more (module.parallel.tp/pp/fsdp), use fewer "
          f"processes per node, or {_INSIST}")


@record(frozen=True)
class MemoryNeed:
    """The memory one rank of a job that does not train holds (the plan sizes it by this, not by a training step)."""

    gib: float  # per rank, the context included
    what: str  # what holds it, as the error line names it (key paths and values)
    fixes: str  # how to make it smaller


def fit_failures(job: DictConfig, plan: ResourcePlan, need: Optional[MemoryNeed] = None) -> list[str]:
    """One line per memory the job would overrun on this node; [] when it fits or the user insists."""
    if job.launch.allow_oversubscribe or plan.per_job_source not in SOURCES_THAT_REFUSE:
        return []
    resources, nproc, per_rank = plan.resources, plan.nproc_per_node, plan.per_job_gib
    what = f"model={job.model.name}, micro_batch_size={job.module.micro_batch_size}, seq_length={job.module.seq_length}"
    fixes = _FIXES
    if need is not None:
        what, fixes = need.what, f"{need.fixes}, or {_INSIST}"
    failures = []
    on_gpu = str(job.platform.device) != "cpu" and resources.num_gpus > 0
    if on_gpu:
        known = [gpu for gpu in resources.gpus[:nproc] if gpu.free_gib is not None]
        smallest = min(known, key=lambda gpu: gpu.free_gib, default=None)
        if smallest is not None and per_rank > smallest.free_gib:
            failures.append(
                f"the job does not fit in GPU memory: each rank needs about {per_rank:.1f} GiB ({what}; "
                f"{plan.per_job_source}) but GPU {smallest.index} has {smallest.free_gib:.1f} GiB free; {fixes}")
        host_per_process = MIN_HOST_GIB_PER_PROCESS
    else:
        host_per_process = MIN_HOST_GIB_PER_PROCESS + max(0.0, per_rank - CONTEXT_OVERHEAD_GIB)
    host_need = nproc * host_per_process
    ram = resources.ram_available_gib
    if ram is not None and host_need > ram:
        processes = f"{nproc} process{'es' if nproc > 1 else ''} x {host_per_process:.1f} GiB"
        failures.append(
            f"the job does not fit in host memory: about {host_need:.1f} GiB ({processes}; {what}; "
            f"{plan.per_job_source}) but {ram:.1f} GiB are available on this node; {fixes}")
    return failures
