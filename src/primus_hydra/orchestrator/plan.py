"""The resource plan: every `auto` knob of a job (or a sweep's points) resolved against this machine.

`build_resource_plan(cfg, resources, sweep_points=)` reads the config and the detected resources and applies the
rules in rules.py; an explicit value in the config (or a variable the user exported) is never replaced. The
plan is reported as one table on stderr and as resources.json; `task=plan` prints it as JSON. No torch import.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from primus_hydra.backends.base import adapter_class
from primus_hydra.config.choices import AUTO, auto_int, is_auto
from primus_hydra.config.layout import ParallelLayout, configured_world_size, unchecked_parallel_layout
from primus_hydra.config.values import to_plain
from primus_hydra.orchestrator import rules
from primus_hydra.orchestrator.gpu_probe import parse_number_env
from primus_hydra.orchestrator.resources import MachineResources, detect_resources, nproc_for
from primus_hydra.orchestrator.working_set import CONTEXT_OVERHEAD_GIB, estimate_rank_gib
from primus_hydra.util.records import record

FALLBACK_PER_JOB_GIB = 4.0  # a training rank whose working set cannot be estimated
PROBE_DEVICE_MARGIN = 1.15  # a measured peak is raised by this much before it sizes jobs
PROBE_HOST_MARGIN = 1.10
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
COMPILE_THREADS_VARIABLE = "TORCHINDUCTOR_COMPILE_THREADS"


@record(frozen=True)
class Slot:
    """Where one concurrently running sweep point goes."""

    gpu_ids: tuple[int, ...]  # nproc_per_node ids for the visible-devices variable; () on CPU
    cpu_ids: tuple[int, ...]  # a share of this process's CPUs (for pinning, optional)
    threads: int  # CPU threads of each of the point's processes


@record(frozen=True)
class PlanInputs:
    """The config values the plan depends on, as plain data (kept so a probe can re-plan without the cfg)."""

    nproc_per_node: object
    nnodes: int
    device: str
    num_workers: object
    compile: bool
    max_parallel: object
    loader_processes: bool  # the backend's batches come from DataLoader worker processes (its adapter's traits)
    estimate_gib: Optional[float]  # None: the model could not be estimated


@record
class ResourcePlan:
    nproc_per_node: int
    num_workers: int
    threads_per_worker: int
    worker_env: dict[str, str]
    per_job_gib: float
    per_job_source: str  # estimate | fallback | env | probe
    jobs_per_gpu: Optional[int]  # None on CPU-only machines
    parallel_jobs: int  # sweep points that may run at once; 1 = serial
    slots: list[Slot]
    auto: dict[str, bool]
    warnings: list[str]
    host_gib_per_job: float
    sweep_points: int
    resources: MachineResources
    inputs: PlanInputs

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in (
            "nproc_per_node", "num_workers", "threads_per_worker", "worker_env", "per_job_source", "jobs_per_gpu",
            "parallel_jobs", "sweep_points", "auto", "warnings")}
        data["per_job_gib"] = round(self.per_job_gib, 2)
        data["host_gib_per_job"] = round(self.host_gib_per_job, 2)
        data["slots"] = [{"gpu_ids": list(s.gpu_ids), "cpu_ids": list(s.cpu_ids), "threads": s.threads} for s in self.slots]
        data["resources"] = self.resources.to_dict()
        return data

    def format_table(self) -> str:
        r = self.resources
        free = ", ".join("?" if g.free_gib is None else f"{g.free_gib:.1f}" for g in r.gpus) or "-"
        ram = "unknown" if r.ram_available_gib is None else f"{r.ram_available_gib:.1f} GiB"
        rows = [
            ("launch.nproc_per_node", self.nproc_per_node, "launch.nproc_per_node"),
            ("module.data.num_workers", self.num_workers, "module.data.num_workers"),
            ("threads per process", self.threads_per_worker, "threads"),
            ("per-job GiB per device", f"{self.per_job_gib:.2f} ({self.per_job_source})", "per_job_gib"),
            ("jobs per GPU", "-" if self.jobs_per_gpu is None else self.jobs_per_gpu, "jobs_per_gpu"),
            ("parallel sweep points", f"{self.parallel_jobs} of {self.sweep_points}", "sweep.max_parallel"),
        ]
        lines = [f"resource plan: {r.num_gpus} GPU(s) [free GiB: {free}], {r.vcpus} vCPU(s), {ram} RAM available"]
        lines += [f"  {name:<24} {str(value):<22} {'' if value == '-' else 'auto' if self.auto.get(key) else 'set'}".rstrip()
                  for name, value, key in rows]
        if self.worker_env:
            lines.append("  env for workers: " + " ".join(f"{k}={v}" for k, v in sorted(self.worker_env.items())))
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def compile_requested(cfg: DictConfig) -> bool:
    """torch.compile is on (module.compile, or torchtitan's backend.compile): Inductor compile threads matter."""
    return bool(OmegaConf.select(cfg, "module.compile", default=False)
                or OmegaConf.select(cfg, "backend.compile", default=False))


def planned_world_size(cfg: DictConfig, num_gpus: int) -> int:
    """launch.nnodes x the nproc_per_node a plan gives on a machine with `num_gpus` GPUs: the world it sizes ranks for."""
    return configured_world_size(cfg, nproc_for(cfg.launch.nproc_per_node, cfg.platform.device, num_gpus))


def plan_inputs(cfg: DictConfig, num_gpus: int, layout: Optional[ParallelLayout] = None) -> PlanInputs:
    """layout: the job's, as prepare() derived it (else this config's split of the planned world)."""
    sweep = cfg.get("sweep")
    nnodes = int(cfg.launch.nnodes)
    try:
        estimate = estimate_rank_gib(cfg, layout or unchecked_parallel_layout(cfg, planned_world_size(cfg, num_gpus)))
    except Exception:  # an incomplete or exotic model: the generic fallback sizes it
        estimate = None
    return PlanInputs(
        nproc_per_node=to_plain(cfg.launch.nproc_per_node), nnodes=nnodes, device=str(cfg.platform.device),
        num_workers=to_plain(cfg.module.data.num_workers), compile=compile_requested(cfg),
        max_parallel=to_plain(sweep.max_parallel) if sweep is not None else AUTO,
        loader_processes=adapter_class(cfg).traits.loader_processes,
        estimate_gib=estimate,
    )


GENERIC_APP_INPUTS = PlanInputs(nproc_per_node=1, nnodes=1, device="auto", num_workers=0, compile=False,
                                max_parallel=AUTO, loader_processes=True, estimate_gib=None)


def plan_for_generic_points(sweep_points: int, resources: MachineResources | None = None,
                            environ: Mapping[str, str] = os.environ) -> ResourcePlan:
    """Slots for the points of a Hydra app that is not primus-hydra's: one process each, sized by the generic
    per-job estimate (PRIMUS_AUTO_PER_JOB_GB overrides it)."""
    resources = resources if resources is not None else detect_resources(environ)
    return plan_from_inputs(GENERIC_APP_INPUTS, resources, sweep_points=sweep_points, environ=environ)


def build_resource_plan(cfg: DictConfig, resources: MachineResources | None = None, *, sweep_points: int = 1,
                        environ: Mapping[str, str] = os.environ,
                        layout: Optional[ParallelLayout] = None) -> ResourcePlan:
    """layout: the job's, derived once by prepare() for planned_world_size (its ranks' working set is sized by it)."""
    resources = resources if resources is not None else detect_resources(environ)
    return plan_from_inputs(plan_inputs(cfg, resources.num_gpus, layout), resources, sweep_points=sweep_points,
                            environ=environ)


def with_working_set(plan: ResourcePlan, gib: float, environ: Mapping[str, str] = os.environ) -> ResourcePlan:
    """The same plan sized by `gib` per rank instead of a training step's working set (a job that does not train:
    task=benchmark's largest case)."""
    return plan_from_inputs(replace(plan.inputs, estimate_gib=gib), plan.resources, sweep_points=plan.sweep_points,
                            environ=environ)


def plan_from_inputs(inputs: PlanInputs, resources: MachineResources, *, sweep_points: int = 1,
                     environ: Mapping[str, str] = os.environ, measured: Optional[tuple[float, Optional[float]]] = None,
                     ) -> ResourcePlan:
    """measured: (device GiB, host GiB or None) from a probe; it only ever raises the per-job sizes."""
    warnings: list[str] = []
    auto = {"launch.nproc_per_node": is_auto(inputs.nproc_per_node),
            "module.data.num_workers": is_auto(inputs.num_workers),
            "sweep.max_parallel": is_auto(inputs.max_parallel)}
    nproc = nproc_for(inputs.nproc_per_node, inputs.device, resources.num_gpus)
    gpus = resources.gpus if inputs.device != "cpu" else ()
    on_gpu = bool(gpus)

    per_job, source = _per_job_gib(inputs, environ)
    if measured is not None:
        per_job, source = max(per_job, PROBE_DEVICE_MARGIN * measured[0]), "probe"
    auto["per_job_gib"] = source in ("estimate", "fallback")
    host_per_process = rules.HOST_GIB_PER_PROCESS
    if measured is not None and measured[1] is not None:
        host_per_process = max(host_per_process, PROBE_HOST_MARGIN * measured[1])
    if not on_gpu:  # the working set lives in host memory
        host_per_process += max(0.0, per_job - CONTEXT_OVERHEAD_GIB)

    # concurrency: device memory, then host RAM, then cores
    hard_cap = parse_number_env(environ, "PRIMUS_AUTO_JOBS_PER_GPU_HARD_CAP", integer=True, allow_zero=False)
    jobs_per_gpu, groups = None, 1
    if on_gpu:
        groups = max(1, len(gpus) // nproc)
        jobs_per_gpu = _jobs_per_gpu(gpus[: groups * nproc], per_job, hard_cap, warnings, sweep=sweep_points > 1)
        capacity = groups * max(1, jobs_per_gpu)
    else:
        capacity = resources.vcpus // nproc
    capacity = min(capacity, resources.vcpus // nproc)
    host_cap = rules.jobs_in_host_memory(resources.ram_available_gib, nproc * host_per_process)
    if host_cap is not None:
        capacity = min(capacity, host_cap)
    parallel = _parallel_jobs(inputs, capacity, sweep_points, warnings)

    # per-process knobs, for the processes that will really run side by side
    loader = _num_workers(inputs, resources, parallel * nproc, environ)
    loader_processes = loader if inputs.loader_processes else 0
    host_per_job = nproc * (host_per_process + rules.HOST_GIB_PER_LOADER * loader_processes)
    if auto["sweep.max_parallel"] and loader_processes:
        host_cap = rules.jobs_in_host_memory(resources.ram_available_gib, host_per_job)
        if host_cap is not None and host_cap < parallel:
            parallel = max(1, host_cap)
    processes = parallel * nproc
    threads = rules.threads_per_process(resources.vcpus, processes, loader_processes,
                                        in_process=processes == 1)
    worker_env, auto["threads"] = _worker_env(inputs, resources, threads, processes, environ)
    if jobs_per_gpu is not None and parallel < groups * jobs_per_gpu:
        jobs_per_gpu = max(1, math.ceil(parallel / groups))
    auto["jobs_per_gpu"] = jobs_per_gpu is not None
    slots = _slots(gpus, nproc, groups, parallel, resources.cpu_ids, threads)
    return ResourcePlan(nproc, loader, threads, worker_env, per_job, source, jobs_per_gpu, parallel, slots, auto,
                        warnings, host_per_job, max(1, sweep_points), resources, inputs)


def _per_job_gib(inputs: PlanInputs, environ: Mapping[str, str]) -> tuple[float, str]:
    forced = parse_number_env(environ, "PRIMUS_AUTO_PER_JOB_GB", allow_zero=False)
    if forced is not None:
        return forced, "env"
    if inputs.estimate_gib is not None:
        return inputs.estimate_gib, "estimate"
    return FALLBACK_PER_JOB_GIB, "fallback"


def _jobs_per_gpu(gpus, per_job: float, hard_cap: Optional[float], warnings: list[str], *, sweep: bool) -> int:
    """Jobs that fit on each GPU (at least 1). Warnings about sizing concurrency only for sweeps; a job that fits
    on no GPU always."""
    free = [g.free_gib for g in gpus if g.free_gib is not None]
    if len(free) < len(gpus):
        if sweep:
            warnings.append("free GPU memory unknown: 1 job per GPU (set PRIMUS_AUTO_FREE_VRAM_GB to size by memory)")
        return 1
    smallest = min(free)
    if sweep and max(free) >= 1.5 * smallest:
        warnings.append(f"free GPU memory is uneven ({smallest:.1f} to {max(free):.1f} GiB): sized by the smallest")
    fit = rules.jobs_per_device(smallest, per_job, int(hard_cap) if hard_cap is not None else None)
    if fit < 1:
        warnings.append(
            f"the per-job estimate {per_job:.1f} GiB exceeds the usable free memory of the GPU(s) "
            f"({rules.usable_after_reserve(smallest, rules.DEVICE_RESERVE_MIN_GIB):.1f} of {smallest:.1f} GiB): "
            f"1 job per GPU, one at a time; it may run out of memory (more tp/pp/fsdp, a smaller micro batch)"
        )
        return 1
    return fit


def _parallel_jobs(inputs: PlanInputs, capacity: int, sweep_points: int, warnings: list[str]) -> int:
    points = max(1, sweep_points)
    if not is_auto(inputs.max_parallel):
        explicit = auto_int(inputs.max_parallel)
        if explicit > capacity and points > 1:
            warnings.append(f"sweep.max_parallel={explicit} exceeds what fits on this machine ({max(capacity, 1)}): honoring it")
        return max(1, min(explicit, points))
    if capacity < 1:
        if points > 1:
            warnings.append("not even one job fits in host memory/cores after the reserve: sweep points run one at a time")
        return 1
    return min(capacity, points)


def _num_workers(inputs: PlanInputs, resources: MachineResources, processes: int, environ: Mapping[str, str]) -> int:
    if not is_auto(inputs.num_workers):  # validated: an integer >= 0
        return auto_int(inputs.num_workers)
    cap = parse_number_env(environ, "PRIMUS_AUTO_DATALOADER_HARD_CAP", integer=True)
    return rules.auto_dataloader_num_workers(processes, resources.vcpus, resources.ram_available_gib,
                                             rules.DATALOADER_HARD_CAP if cap is None else int(cap))


def _worker_env(inputs: PlanInputs, resources: MachineResources, threads: int, processes: int,
                environ: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """The variables to hoist into every worker: only those the user has not set. `auto` in
    TORCHINDUCTOR_COMPILE_THREADS is replaced by a number even without compile (Inductor calls int() on it)."""
    env = {name: str(threads) for name in THREAD_VARIABLES if name not in environ}
    compile_value = environ.get(COMPILE_THREADS_VARIABLE)  # validated (resource_checks.py): auto or an integer >= 1
    if (compile_value is not None and is_auto(compile_value.strip())) or (compile_value is None and inputs.compile):
        env[COMPILE_THREADS_VARIABLE] = str(rules.compile_threads(resources.vcpus, processes))
    return env, "OMP_NUM_THREADS" not in environ


def _slots(gpus, nproc: int, groups: int, parallel: int, cpu_ids: tuple[int, ...], threads: int) -> list[Slot]:
    """Points spread over the GPU groups first (round robin), then stack; CPUs split into contiguous shares."""
    slots = []
    share = max(1, len(cpu_ids) // max(1, parallel))
    for i in range(parallel):
        gpu_ids = tuple(g.index for g in gpus[(i % groups) * nproc: (i % groups + 1) * nproc]) if gpus else ()
        start = (i * share) % max(1, len(cpu_ids))
        slots.append(Slot(gpu_ids, tuple(cpu_ids[start: start + share]), threads))
    return slots


def tighten_with_measured_peak(plan: ResourcePlan, peak_gib: float, host_peak_gib: Optional[float] = None, *,
                               environ: Mapping[str, str] = os.environ) -> ResourcePlan:
    """Re-plan with a probe's measured peak (device GiB of one rank; host GiB of one process, optional).
    Never loosens: concurrency only goes down; explicit values are untouched."""
    new = plan_from_inputs(plan.inputs, plan.resources, sweep_points=plan.sweep_points, environ=environ,
                           measured=(peak_gib, host_peak_gib))
    parallel = min(new.parallel_jobs, plan.parallel_jobs) if plan.auto["sweep.max_parallel"] else plan.parallel_jobs
    jobs_per_gpu = plan.jobs_per_gpu if plan.jobs_per_gpu is None or new.jobs_per_gpu is None else min(
        plan.jobs_per_gpu, new.jobs_per_gpu)
    return replace(new, per_job_gib=max(new.per_job_gib, plan.per_job_gib), parallel_jobs=parallel,
                   jobs_per_gpu=jobs_per_gpu, slots=new.slots[:parallel],
                   warnings=plan.warnings + [w for w in new.warnings if w not in plan.warnings])


def write_resources_json(plan: ResourcePlan, directory: Path | str) -> Path:
    path = Path(directory) / "resources.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
    return path

