"""`sweep.probe=true`: the first point runs alone for `sweep.probe_steps` steps before the sweep, to measure it.

The plan sizes points from estimates; mhcflurry #363 shows how that ends (a plan from a 2.5 GB estimate OOMed at
2.7-4.1 GiB per worker). The probe runs the real point (same config, same slot shape, fewer steps) in
`<sweep dir>/.probe/`, reads its peak (CUDA/HIP max reserved on GPUs, max RSS on the CPU) and tightens the auto
plan with it; tightening never loosens a plan and leaves explicit values alone. With compilation on, the probe
also fills the shared Inductor cache (TORCHINDUCTOR_CACHE_DIR in the sweep dir) with a larger compile-thread
budget, so that the points that follow load their kernels instead of compiling them side by side.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.launch.sweep.processes import PointProcesses, SweepPoint
from primus_hydra.launch.sweep.summary import PointOutcome, say
from primus_hydra.orchestrator.plan import ResourcePlan, compile_requested, tighten_with_measured_peak
from primus_hydra.orchestrator.rules import compile_threads

PROBE_SUBDIR = ".probe"
INDUCTOR_CACHE_SUBDIR = ".inductor_cache"


def compile_environment(config: DictConfig, sweep_dir: Path) -> dict:
    """With compilation on, every point shares one Inductor cache in the sweep dir (unless the user chose one)."""
    if not compile_requested(config):
        return {}
    return {"TORCHINDUCTOR_CACHE_DIR": str(sweep_dir / INDUCTOR_CACHE_SUBDIR)}


def probe_overrides(point: SweepPoint, steps: int) -> list[str]:
    """The point's overrides, shortened to `steps` steps (warmup no longer than the run)."""
    shortened = {"module.train_iters": steps,
                 "module.warmup_iters": min(int(point.prepared.cfg.module.warmup_iters), steps)}
    kept = [o for o in point.overrides if o.split("=", 1)[0].lstrip("+~") not in shortened]
    return kept + [f"{key}={value}" for key, value in shortened.items()]


def measure(probe: SweepPoint, plan: ResourcePlan, processes: PointProcesses) -> Optional[tuple]:
    """Run the probe alone on the plan's first slot; the arguments for tighten_with_measured_peak, or None when it
    measured nothing usable."""
    outcome = PointOutcome(job=probe.job, overrides=probe.shown, run_dir=str(probe.run_dir))
    extra_env = {}
    if compile_requested(probe.config) and "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        extra_env["TORCHINDUCTOR_COMPILE_THREADS"] = str(compile_threads(plan.resources.vcpus, 1, warmup=True))
    steps = probe.prepared.cfg.module.train_iters
    say(f"probe: job {probe.job} for {steps} step(s) alone in {probe.run_dir}")
    processes.run_alone(probe, outcome, plan.slots[0], plan, extra_env)
    if outcome.status != "ok":
        say(f"probe: {outcome.status}: {outcome.error} (log: {probe.run_dir / 'point.log'}); the plan stays as estimated")
        return None
    if plan.slots[0].gpu_ids:  # one rank's device peak, and one process's host peak
        if outcome.peak_device_gib is None:
            say("probe: no device peak measured (the point ran its GPUs in worker processes); the plan stays as estimated")
            return None
        say(f"probe: ok in {outcome.wall_s:.1f} s, measured {outcome.peak_device_gib:.2f} GiB device max reserved, "
            f"{outcome.peak_host_gib:.2f} GiB host max RSS per process")
        return outcome.peak_device_gib, outcome.peak_host_gib
    # on the CPU the working set is host memory: the process's RSS is the per-job size
    say(f"probe: ok in {outcome.wall_s:.1f} s, measured {outcome.peak_host_gib:.2f} GiB host max RSS per process")
    return (outcome.peak_host_gib,)


def tightened(plan: ResourcePlan, measured: Optional[tuple]) -> ResourcePlan:
    """The plan tightened by what the probe measured (unchanged when it measured nothing); both tables shown."""
    if measured is None:
        return plan
    new = tighten_with_measured_peak(plan, *measured)
    say("plan before the probe:\n" + plan.format_table())
    say("plan after the probe:\n" + new.format_table())
    return new
