"""task.calibrate=true: a few real steps of the projected job on this machine, measured next to the projection.

The job runs as task=train would (same preparation, same launcher), for task.calibrate_steps steps, in a
temporary run dir that is removed afterwards (kept, and named, when the run fails). No checkpoint is written.
backend=torch measures each rank's peak memory (backend.measure_memory: CUDA's allocator statistics, or the
torch profiler's allocation events on the CPU); tokens/s is the median of the steps after the first two.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from omegaconf import DictConfig, open_dict, read_write

from primus_hydra.config.schema_task import TrainTaskConfig
from primus_hydra.errors import ConfigValidationError, PrimusError
from primus_hydra.tasks.objective import METRICS_FILE

WARMUP_STEPS = 2


def calibration_config(cfg: DictConfig) -> DictConfig:
    steps = int(cfg.task.calibrate_steps)
    if steps <= WARMUP_STEPS:
        raise ConfigValidationError([f"task.calibrate_steps={steps}: must be > {WARMUP_STEPS} (the first "
                                     f"{WARMUP_STEPS} steps warm up and are not timed)"])
    if int(cfg.launch.nnodes) != 1:
        raise ConfigValidationError([f"task.calibrate=true runs on this machine: launch.nnodes={cfg.launch.nnodes} "
                                     f"must be 1 (project the cluster, calibrate one node)"])
    run = copy.deepcopy(cfg)
    with read_write(run), open_dict(run):
        run.task = TrainTaskConfig(_target_="primus_hydra.tasks.train.TrainTask", name="train")
        run.module.train_iters = steps
        run.module.warmup_iters = 0  # the schedule does not change a step's cost
        run.module.exit_interval = None
        run.module.checkpoint.interval = 0
        run.module.checkpoint.save_final = False
        run.module.checkpoint.resume = None
        run.module.checkpoint.dir = None
        run.module.log.plot = False
        run.module.log.tensorboard = False
        run.module.log.progress_bar = False
        if "measure_memory" in run.backend:
            run.backend.measure_memory = True
    return run


@contextlib.contextmanager
def stdout_to_stderr():
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def calibrate(cfg: DictConfig, projection) -> dict:
    from primus_hydra.tasks.train import TrainTask

    run_cfg = calibration_config(cfg)
    run_dir = Path(tempfile.mkdtemp(prefix="primus_projection_calibrate_"))
    print(f"calibration: {run_cfg.module.train_iters} real steps in {run_dir} ...", file=sys.stderr, flush=True)
    try:
        with stdout_to_stderr():  # stdout carries the JSON only; the run's workers inherit the descriptor
            TrainTask(run_cfg, run_dir=run_dir).run()
        records = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]
    except (PrimusError, OSError, ValueError) as error:
        raise PrimusError(f"task.calibrate: the calibration run failed ({str(error).splitlines()[0] if str(error) else type(error).__name__}); "
                          f"its logs are in {run_dir}") from error
    shutil.rmtree(run_dir, ignore_errors=True)
    result = compare(records, projection)
    print(calibration_report(result), file=sys.stderr)
    return result


def compare(records: list[dict], projection) -> dict:
    timed = [record["tokens_per_s"] for record in records if record["step"] > WARMUP_STEPS]
    measured_tokens = statistics.median(timed)
    peaks = [record["peak_memory_gib_per_rank"] for record in records if record.get("peak_memory_gib_per_rank")]
    per_rank = [max(values) for values in zip(*peaks)] if peaks else None
    # what the allocator sees (CUDA's max_memory_allocated, the CPU profiler's events): not the runtime's context
    projected_gib = projection.stage.total / 2 ** 30 - projection.hardware.runtime_overhead_gib
    result = {
        "steps": len(records), "timed_steps": len(timed),
        "tokens_per_s": {"projected": round(projection.tokens_per_s, 1), "measured": round(measured_tokens, 1),
                         "error": round(projection.tokens_per_s / measured_tokens - 1, 4)},
        "peak_memory_gib": None,
    }
    if per_rank:
        worst = max(per_rank)
        result["peak_memory_gib"] = {"projected": round(projected_gib, 4), "measured": round(worst, 4),
                                     "measured_per_rank": [round(value, 4) for value in per_rank],
                                     "error": round(projected_gib / worst - 1, 4)}
    return result


def calibration_report(result: dict) -> str:
    tokens = result["tokens_per_s"]
    lines = [f"calibration ({result['timed_steps']} timed steps):",
             f"  tokens/s        projected {tokens['projected']:,.0f}, measured {tokens['measured']:,.0f} "
             f"({100 * tokens['error']:+.1f} %)"]
    memory = result["peak_memory_gib"]
    if memory:
        lines.append(f"  peak GiB/rank   projected {memory['projected']:.4f}, measured {max(memory['measured_per_rank']):.4f} "
                     f"(per rank: {', '.join(f'{v:.4f}' for v in memory['measured_per_rank'])}; {100 * memory['error']:+.1f} %)")
    else:
        lines.append("  peak GiB/rank   not measured by this backend (backend=torch measures it)")
    return "\n".join(lines)
