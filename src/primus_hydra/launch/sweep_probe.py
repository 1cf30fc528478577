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

from omegaconf import DictConfig, OmegaConf, open_dict

from primus_hydra.launch.sweep_summary import PointOutcome

PROBE_SUBDIR = ".probe"
INDUCTOR_CACHE_SUBDIR = ".inductor_cache"


def compile_requested(config: DictConfig) -> bool:
    return bool(OmegaConf.select(config, "module.compile", default=False)
                or OmegaConf.select(config, "backend.compile", default=False))


def compile_environment(config: DictConfig, sweep_dir: Path) -> dict:
    """With compilation on, every point shares one Inductor cache in the sweep dir (unless the user chose one)."""
    if not compile_requested(config):
        return {}
    return {"TORCHINDUCTOR_CACHE_DIR": str(sweep_dir / INDUCTOR_CACHE_SUBDIR)}


def run_probe(sweep, point, plan):
    """Run `point` for sweep.probe_steps steps alone; return the plan tightened by its measured peak."""
    from primus_hydra.launch.local_sweep import SweepPoint, say
    from primus_hydra.orchestrator.plan import tighten_with_measured_peak
    from primus_hydra.orchestrator.rules import compile_threads

    steps = int(point.config.sweep.probe_steps)
    overrides = [o for o in point.overrides if not o.lstrip("+~").startswith("module.train_iters=")]
    overrides.append(f"module.train_iters={steps}")
    config = sweep.hydra_context.config_loader.load_sweep_config(sweep.config, overrides)
    with open_dict(config):
        config.hydra.job.id = point.job
        config.hydra.job.num = point.job
        config.hydra.sweep.subdir = PROBE_SUBDIR
    probe = SweepPoint(point.job, overrides, [f"probe of job {point.job}", f"module.train_iters={steps}"], config,
                       sweep.run_dir_of(config))
    outcome = PointOutcome(job=point.job, overrides=probe.shown, run_dir=str(probe.run_dir))
    extra_env = {}
    if compile_requested(config) and "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        extra_env["TORCHINDUCTOR_COMPILE_THREADS"] = str(compile_threads(plan.resources.vcpus, 1, warmup=True))
    say(f"probe: job {point.job} for {steps} step(s) alone in {probe.run_dir}")
    sweep.start(probe, outcome, plan.slots[0], plan, 0, extra_env=extra_env)
    while sweep._running:
        if sweep._stop_signal is not None:
            sweep.stop_running()
            raise SystemExit(128 + sweep._stop_signal)
        sweep.wait_for_ended()
    if outcome.status != "ok":
        say(f"probe: {outcome.status}: {outcome.error} (log: {probe.run_dir / 'point.log'}); the plan stays as estimated")
        return plan
    on_gpu = bool(plan.slots[0].gpu_ids)
    if on_gpu and outcome.peak_device_gib is None:
        say("probe: no device peak measured (the point ran its GPUs in worker processes); the plan stays as estimated")
        return plan
    if on_gpu:  # one rank's device peak, and one process's host peak
        tightened = tighten_with_measured_peak(plan, outcome.peak_device_gib, outcome.peak_host_gib)
        measured = f"{outcome.peak_device_gib:.2f} GiB device max reserved, {outcome.peak_host_gib:.2f} GiB host max RSS"
    else:  # on the CPU the working set is host memory: the process's RSS is the per-job size
        tightened = tighten_with_measured_peak(plan, outcome.peak_host_gib)
        measured = f"{outcome.peak_host_gib:.2f} GiB host max RSS"
    say(f"probe: ok in {outcome.wall_s:.1f} s, measured {measured} per process")
    say("plan before the probe:\n" + plan.format_table())
    say("plan after the probe:\n" + tightened.format_table())
    return tightened
