"""Prepare a job once, before Hydra makes its run directory: validate, plan, resolve `auto`, check what would fail.

`prepare(cfg, ...) -> PreparedJob` is the one place a job is checked: the config rules (config/validate.py), the
resource overrides and the visible-devices mask, the resource plan (which resolves `launch.nproc_per_node` and
`module.data.num_workers`), the layout for the job's world size (config/layout.py), the visible GPU count, the
backend adapter's own rules, the patch ids, and the paths a run reads. Every failure is one line; all are
reported together. A job with a run dir gets its backend's arguments translated here, once
(backends/translation.py). The single-run path (PrepareJobCallback), the local sweep and the Slurm submission call
it; workers load what it prepared, the translated arguments included (launch/job_config.py), and trust it.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import sys
from dataclasses import field
from pathlib import Path
from typing import Any, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from primus_hydra.backends.architecture_support import architecture_failures
from primus_hydra.backends.base import load_adapter
from primus_hydra.backends.translation import Translation, translate
from primus_hydra.config.choices import auto_int, is_auto
from primus_hydra.config.layout import ParallelLayout, configured_world_size, parallel_layout
from primus_hydra.config.paths import (
    chdir_launch_dir,
    make_user_paths_absolute,
    resolve_checkpoint_dir,
    run_dir_failures,
)
from primus_hydra.config.validate import validate_config
from primus_hydra.config.values import without_hydra_node
from primus_hydra.distributed_env import DistributedEnv
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.fit_checks import MemoryNeed, fit_failures
from primus_hydra.orchestrator.network_interfaces import socket_interface_failures
from primus_hydra.orchestrator.plan import ResourcePlan, build_resource_plan, planned_world_size, with_working_set
from primus_hydra.orchestrator.resource_checks import (
    master_address_failures,
    override_failures,
    visible_devices_failures,
)
from primus_hydra.orchestrator.resources import detect_resources
from primus_hydra.patches.runner import patch_failures
from primus_hydra.util.records import record


@record(frozen=True)
class Placement:
    """Where a job runs, decided once, when it is prepared (tasks/train.py: placement_of)."""

    # rank (this process is one, started by torchrun/srun) | slurm | this_process | elastic (its workers), or
    # this_machine before the job's world size tells the last two apart
    kind: str
    dist: DistributedEnv  # this process, as its launcher (if any) started it
    slurm: Optional[dict] = None  # kind=slurm: the primus_slurm launcher's settings


@record
class PreparedJob:
    cfg: DictConfig  # the job's config (no `hydra` node): validated, its `auto` knobs resolved where planned
    layout: ParallelLayout
    plan: Optional[ResourcePlan] = None  # None: planned on the nodes that run it (Slurm), or loaded by a worker
    warnings: list[str] = field(default_factory=list)  # one line each, shown once by whoever launches the job
    auto_knobs: frozenset = frozenset()  # the knobs that were `auto` in the job's own config (resolved by its plan)
    translation: Optional[Translation] = None  # the backend's arguments (None: prepared before its run dir was known)
    placement: Optional[Placement] = None  # set by the task that prepared it


def prepare(cfg: DictConfig, *, run_dir: Optional[Path] = None, world_size: Optional[int] = None,
            plan: Optional[ResourcePlan] = None, sweep_points: int = 1, on_this_machine: bool = True,
            launched: bool = False, trains: bool = True, runs_on_gpu: Optional[bool] = None,
            memory_need: Optional[MemoryNeed] = None, fixed: Optional[Mapping[str, Any]] = None,
            handed_over: bool = False) -> PreparedJob:
    """The job `cfg` describes, checked and planned; ConfigValidationError (every failed check, one line each).

    run_dir: where it will write (None when unknown). world_size: fixed by who starts the ranks (a torchrun/srun
    job, a Slurm job's shape); else launch.nnodes x the planned nproc_per_node. plan: a plan made already (the
    local sweep's, shared by its points). on_this_machine=False: the job runs elsewhere (Slurm nodes): no plan,
    no check of this machine's GPUs, paths or libraries. launched: this process is already a rank of its job,
    started by a launcher that owns the machine: no plan either.
    trains: the job will train (not a dry run, not a plan): its library and the files it reads must be there.
    runs_on_gpu: where the job's backend will run when no plan says it (task=projection: its hardware entry).
    memory_need: what a rank of a job that does not train holds (task=benchmark): the plan and the fit check use it.
    fixed: values the job's launcher decides ({key: value}; a Slurm job: its ranks per node, a checkpoint on the
    preemption signal), set before anything is checked or translated, so that its nodes run the config it was made for.
    handed_over: the caller has no further use for `cfg` (a job config without `hydra`, composed for this check):
    it becomes the job's config, prepared in place, instead of a copy (~5 ms).
    """
    job = cfg if handed_over and "hydra" not in cfg else without_hydra_node(cfg)
    for key, value in (fixed or {}).items():
        OmegaConf.update(job, key, value)
    launch_dir = chdir_launch_dir(cfg)
    if launch_dir is not None:  # hydra.job.chdir=true: the job runs in its run dir, the user meant the launch dir
        make_user_paths_absolute(job, launch_dir)
    warnings = validate_config(job)
    failures = run_dir_failures(run_dir) if run_dir is not None else []
    failures += override_failures() if on_this_machine else []
    if on_this_machine and not launched and not failures:  # detection reads the overrides: they must be valid
        failures += visible_devices_failures(job)
    if failures:
        raise ConfigValidationError(failures)
    auto_knobs = frozenset(key for key in AUTO_KNOBS if is_auto(OmegaConf.select(job, key)))
    layout = None  # derived once (config/layout.py), ConfigValidationError when the config does not fit the world
    if on_this_machine and not launched:
        if plan is None:  # this job's own plan sizes its ranks by its layout
            resources = detect_resources()
            layout = parallel_layout(job, world_size or planned_world_size(job, resources.num_gpus))
            plan = build_resource_plan(job, resources, sweep_points=sweep_points, layout=layout)
        plan = with_working_set(plan, memory_need.gib) if memory_need is not None else plan
        _resolve_auto_knobs(job, plan, auto_knobs)
    if layout is None:
        world = world_size if world_size is not None else configured_world_size(job)
        if world is None:
            raise ValueError("prepare: the world size of a job planned elsewhere must be given")
        layout = parallel_layout(job, world)
    if on_this_machine and not launched and trains:
        failures += _device_count_failures(job, plan)
        failures += master_address_failures(job) if layout.world_size > 1 else []
        failures += socket_interface_failures(on_gpu=_runs_on_gpu(job, plan)) if layout.world_size > 1 else []
    if plan is not None and not launched and not job.task.get("dry_run", False):
        failures += fit_failures(job, plan, memory_need)
    adapter = load_adapter(job, layout, run_dir)
    adapter.runs_on_gpu = runs_on_gpu
    if plan is not None:
        adapter.runs_on_gpu = _runs_on_gpu(job, plan)
    failures += adapter.validate()
    failures += architecture_failures(job.model, adapter.name, on_this_machine and trains, adapter.runs_on_gpu,
                                      adapter.traits)
    warnings += adapter.warnings()
    failures += patch_failures(job)
    if on_this_machine and trains:
        failures += input_path_failures(job) + adapter.training_failures()
    if failures:
        raise ConfigValidationError(failures)
    resolve_checkpoint_dir(job, run_dir)  # checked as the user gave it; read as resolved by the backends and workers
    if run_dir is not None:  # the arguments its workers get (a PatchError when a build_args patch fails)
        adapter.translation = translate(adapter, run_dir, quiet=True)
    if on_this_machine and trains:  # the library's own checks of those arguments: they import it, only for a sound job
        failures = adapter.library_failures()
    if failures:
        raise ConfigValidationError(failures)
    return PreparedJob(job, layout, plan, warnings + (list(plan.warnings) if plan is not None else []), auto_knobs,
                       adapter.translation)


def translate_in_run_dir(job: PreparedJob, run_dir: Path) -> None:
    """A job prepared before its run dir was known (a Slurm sweep's point): its checkpoint dir resolved in
    `run_dir` and its arguments translated there, once, as prepare() does for a job that has one."""
    resolve_checkpoint_dir(job.cfg, run_dir)
    job.translation = translate(load_adapter(job.cfg, job.layout, run_dir), run_dir, quiet=True)


def show_warnings(job: PreparedJob, label: str = "") -> None:
    """The job's warnings on stderr, one line each, by whoever prepared it (once)."""
    for warning in job.warnings:
        print(f"warning: {label}{warning}", file=sys.stderr, flush=True)


AUTO_KNOBS = ("launch.nproc_per_node", "module.data.num_workers")  # what a plan resolves in the job's config


def _resolve_auto_knobs(cfg: DictConfig, plan: ResourcePlan, auto_knobs: frozenset) -> None:
    """The plan's values into the job's `auto` knobs: what the workers read."""
    values = {"launch.nproc_per_node": plan.nproc_per_node, "module.data.num_workers": plan.num_workers}
    for key in auto_knobs:
        OmegaConf.update(cfg, key, values[key])


def replan(job: PreparedJob, plan: ResourcePlan) -> PreparedJob:
    """The same job under a revised plan (after a sweep's probe): its `auto` knobs take the plan's values, the rest
    (checked already) stays. A worker translates again when a new value changed its arguments (translation.py)."""
    cfg = copy.deepcopy(job.cfg)
    _resolve_auto_knobs(cfg, plan, job.auto_knobs)
    return dataclasses.replace(job, cfg=cfg, plan=plan)


def _runs_on_gpu(job: DictConfig, plan: ResourcePlan) -> bool:
    return job.platform.device == "cuda" or (job.platform.device == "auto" and plan.resources.num_gpus > 0)


def _device_count_failures(job: DictConfig, plan: ResourcePlan) -> list[str]:
    gpus = plan.resources.num_gpus
    nproc = auto_int(job.launch.nproc_per_node)
    wants_gpu = _runs_on_gpu(job, plan)
    if job.platform.device == "cuda" and gpus == 0:
        return ["platform.device=cuda but this machine shows no GPU (nvidia-smi, amd-smi, rocm-smi, visible-devices "
                "variables); use platform.device=cpu"]
    if wants_gpu and nproc is not None and nproc > gpus:
        return [f"launch.nproc_per_node={nproc} exceeds the {gpus} visible GPU(s) of this node; "
                f"use launch.nproc_per_node=auto or <= {gpus} (or platform.device=cpu)"]
    return []


def input_path_failures(job: DictConfig) -> list[str]:
    """The files a run reads, where the config names them: they exist (their format is the backend's check)."""
    failures = []
    data = job.module.data
    if data.path and data.source in ("text", "tokens") and not Path(str(data.path)).expanduser().exists():
        kind = "text files" if data.source == "text" else "a pre-tokenized token file"
        failures.append(f"module.data.path={data.path}: no such file or folder (module.data.source={data.source} "
                        f"reads {kind})")
    checkpoint = job.module.checkpoint
    for key, value in (("resume", checkpoint.resume), ("load", checkpoint.load)):
        if value not in (None, "auto") and not Path(str(value)).expanduser().exists():
            failures.append(f"module.checkpoint.{key}={value}: no such checkpoint (nothing at that path)")
    return failures


def plan_on_this_node(job: PreparedJob, nproc_per_node: Optional[int] = None) -> PreparedJob:
    """A job prepared on another machine (a Slurm submission) gets this node's plan: its `auto` knobs resolved for
    the node's own CPUs, memory and GPUs. The layout stays the one the job was prepared for."""
    cfg = copy.deepcopy(job.cfg)
    if nproc_per_node is not None:
        cfg.launch.nproc_per_node = nproc_per_node
    auto_knobs = frozenset(key for key in AUTO_KNOBS if is_auto(OmegaConf.select(cfg, key)))
    plan = build_resource_plan(cfg, layout=job.layout)
    _resolve_auto_knobs(cfg, plan, auto_knobs)
    return dataclasses.replace(job, cfg=cfg, plan=plan, auto_knobs=auto_knobs)


class JobHandoff:
    """Jobs prepared before Hydra's run_job, for the task it then calls, by run dir.

    Hydra calls the single-run callback (which prepares the job before the run dir exists) and then the task
    function with a deep copy of the config: this is how the task gets the job instead of preparing it again.
    A local sweep point's process hands over the job its parent prepared the same way. Taken once.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, PreparedJob] = {}

    def give(self, run_dir: Path, job: PreparedJob) -> None:
        self._jobs[os.path.abspath(run_dir)] = job

    def take(self, run_dir: Path) -> Optional[PreparedJob]:
        return self._jobs.pop(os.path.abspath(run_dir), None)


HANDOFF = JobHandoff()
