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


_MEASURED: dict = {}  # sweep dir -> the probe's tighten arguments (or None): later batches of a sweep reuse them


def run_probe(sweep, point, plan):
    """Run `point` for sweep.probe_steps steps alone; return the plan tightened by its measured peak. When Hydra
    launches a sweep in batches (hydra.sweeper.max_batch_size), the first batch probes and the others reuse it."""
    from primus_hydra.launch.local_sweep import say
    from primus_hydra.orchestrator.plan import tighten_with_measured_peak

    key = str(sweep.sweep_dir)
    if key in _MEASURED:
        say("probe: measured by an earlier batch of this sweep")
    else:
        _MEASURED[key] = _measure(sweep, point, plan)
    if _MEASURED[key] is None:
        return plan
    tightened = tighten_with_measured_peak(plan, *_MEASURED[key])
    say("plan before the probe:\n" + plan.format_table())
    say("plan after the probe:\n" + tightened.format_table())
    return tightened


def _measure(sweep, point, plan):
    """The probe run; the arguments for tighten_with_measured_peak, or None when it measured nothing usable."""
    from primus_hydra.config.validate import validate_config
    from primus_hydra.errors import ConfigValidationError
    from primus_hydra.launch.local_sweep import SweepPoint, say
    from primus_hydra.orchestrator.rules import compile_threads

    steps = int(point.config.sweep.probe_steps)
    shortened = {"module.train_iters": steps, "module.warmup_iters": min(int(point.config.module.warmup_iters), steps)}
    overrides = [o for o in point.overrides if o.split("=", 1)[0].lstrip("+~") not in shortened]
    overrides += [f"{key}={value}" for key, value in shortened.items()]
    config = sweep.hydra_context.config_loader.load_sweep_config(sweep.config, overrides)
    with open_dict(config):
        config.hydra.job.id = point.job
        config.hydra.job.num = point.job
        config.hydra.sweep.subdir = PROBE_SUBDIR
    try:
        validate_config(config)
    except ConfigValidationError as error:
        say(f"probe: skipped, {steps} step(s) of job {point.job} do not validate: {error.failures[0]}; "
            "the plan stays as estimated")
        return None
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
