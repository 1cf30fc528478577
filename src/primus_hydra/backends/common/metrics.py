"""Per-step metrics on rank 0: metrics.jsonl (every step), TensorBoard, the experiment trackers of logger.use
(tracking.py), periodic log lines, and a loss-curve PNG."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Optional

import torch

from primus_hydra.backends.cpu_peak_cache import cached_peak, store_peak
from primus_hydra.errors import PrimusError

log = logging.getLogger("primus_hydra.train")

METRICS_FILE = "metrics.jsonl"
EVAL_LOSS = "eval_loss"  # a step's record has it when module.eval_interval evaluated after that step
LOSS_PLOT_FILE = "loss_curve.png"


def cpu_matmul_peak_tflops(dtype: torch.dtype, *, fresh: bool = False, windows: int = 1) -> float:
    """The measured matmul peak of this CPU at this thread count, cached per machine (measuring costs start-up time):
    the cache's value, or the best of `windows` measurements (`fresh`: measured whatever the cache holds)."""
    threads = torch.get_num_threads()
    cached = None if fresh else cached_peak(threads, str(dtype))
    if cached is not None:
        return cached
    measured = max(measure_matmul_peak_tflops(torch.device("cpu"), dtype) for _ in range(windows))
    store_peak(threads, str(dtype), measured)
    return measured


class MfuBaseline:
    """The MFU denominator: platform.peak_tflops_per_device, a vendor's table, or (`measured_dtype` set) this CPU's
    measured matmul peak. A step faster than a measured peak shows it was measured low (a busy machine, another job):
    it is measured again, once a run and by the rank that logs, and a step that still beats it reads as it ran, above
    100 %, with one warning that the baseline is stale. A step's measurement is never clamped to the baseline."""

    REMEASURE_WINDOWS = 4  # the best of four 0.25 s windows: a moment's load lowers one window, not the peak

    def __init__(self, tflops: Optional[float], *, measured_dtype: Optional[torch.dtype] = None,
                 remeasure: bool = False):
        self.tflops, self.measured_dtype = tflops, measured_dtype
        self.remeasure = remeasure and measured_dtype is not None
        self.stale_said = False

    def mfu(self, step_tflops: float, step: int) -> Optional[float]:
        if not self.tflops:
            return None
        if step_tflops > self.tflops and self.remeasure:
            self.remeasure = False
            measured = cpu_matmul_peak_tflops(self.measured_dtype, fresh=True, windows=self.REMEASURE_WINDOWS)
            log.info("MFU baseline: step %d ran %.3f TFLOP/s, above the measured peak %.3f: measured again, %.3f TFLOP/s",
                     step, step_tflops, self.tflops, measured)
            self.tflops = max(self.tflops, measured)
        if step_tflops > self.tflops and self.measured_dtype is not None and not self.stale_said:
            self.stale_said = True
            log.warning("MFU baseline is stale: step %d ran %.3f TFLOP/s per rank, above this CPU's measured matmul "
                        "peak %.3f TFLOP/s, so MFU reads above 100 %%; set platform.peak_tflops_per_device for a fixed "
                        "baseline", step, step_tflops, self.tflops)
        return step_tflops / self.tflops


def measure_matmul_peak_tflops(device: torch.device, dtype: torch.dtype, seconds: float = 0.25) -> float:
    """Achievable dense matmul TFLOP/s of this device: the MFU denominator when the platform gives no peak."""
    size = 1024
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 2 * size**3 * count / (time.perf_counter() - start) / 1e12


def measure_op_dispatch_us(chain: int = 20, rounds: int = 200) -> float:
    """Host time of one eager op with autograd, forward or backward: a chain of multiplies on a tiny tensor, so
    that dispatch and bookkeeping, not arithmetic, is what is timed (task=projection's host-overhead unit)."""
    x = torch.ones(16, requires_grad=True)

    def run(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            y = x
            for _ in range(chain):
                y = y * 1.0001
            y.sum().backward()
        return (time.perf_counter() - start) / (count * (2 * chain + 2)) * 1e6

    run(rounds // 10)
    return min(run(rounds) for _ in range(3))


class MetricsLogger:
    """metrics.jsonl holds one record per step. A fresh run creates it (never appending to another run's); a
    resumed or restarted one continues it from its first step: the records of the steps it redoes (logged after
    the checkpoint it resumed from, before the stop) are dropped first, in one atomic rewrite."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, log_interval: int, resuming: bool,
                 trackers=None):
        self.run_dir, self.enabled, self.log_interval = Path(run_dir), enabled, log_interval
        self.trackers = trackers  # tracking.ExperimentTrackers: each record is queued for them, never waited on
        self.path = self.run_dir / METRICS_FILE
        self._file = None
        self._tb = None
        self._resuming = resuming
        if not enabled:
            return
        if not resuming:
            try:
                self._file = open(self.path, "x", buffering=1)
            except FileExistsError:
                raise PrimusError(
                    f"{self.path} already holds an earlier run's metrics; choose a new hydra.run.dir, "
                    f"or continue that run with module.checkpoint.resume=auto"
                ) from None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))

    def log_step(self, record: dict, total_steps: int) -> None:
        if not self.enabled:
            return
        if self._file is None:  # resuming: opened at the first step it logs, which says what it redoes
            keep_records_before(self.path, record["step"])
            self._file = open(self.path, "a", buffering=1)
        self._file.write(json.dumps(record) + "\n")
        if self.trackers is not None:
            self.trackers.log(record)
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._tb.add_scalar("eval/loss" if key == EVAL_LOSS else f"train/{key}", value, record["step"])
        step = record["step"]
        evaluated = record.get(EVAL_LOSS) is not None
        if step % self.log_interval == 0 or step == total_steps or step == 1 or evaluated:
            mfu = f" | MFU {record['mfu'] * 100:.1f}%" if record.get("mfu") is not None else ""
            held_out = f" | eval_loss {record[EVAL_LOSS]:.4f}" if evaluated else ""
            log.info(
                "step %d/%d | loss %.4f%s | lr %.3e | grad_norm %.3f | %s tok/s | %.3f TFLOP/s%s",
                step, total_steps, record["loss"], held_out, record["lr"], record["grad_norm"],
                f"{record['tokens_per_s']:,.0f}", record["tflops"], mfu,
            )

    def close(self, plot: bool) -> Optional[Path]:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        written = self._file is not None or (self.enabled and self._resuming)
        if self._file is not None:
            self._file.close()
            self._file = None
        if plot and written and self.path.is_file():
            try:
                return plot_loss_curve(self.path, self.run_dir / LOSS_PLOT_FILE)
            except Exception as error:  # noqa: BLE001 - a plot is never worth a finished run
                log.warning("no loss-curve plot: %s: %s (metrics.jsonl has every step)", type(error).__name__, error)
        return None


def keep_records_before(path: Path, step: int) -> None:
    """Drop the records of `step` and later from a metrics file (written whole, then renamed); a torn last line
    (a crash mid-write) goes too. Lines that are not records stay as they were."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()  # torn: the step it belonged to is redone
    kept = [line for line in lines if not _step_at_or_after(line, step)]
    if len(kept) == len(lines) and text.endswith("\n"):
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)


def _step_at_or_after(line: str, step: int) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] >= step


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_loss_curve(metrics_path: Path, png_path: Path) -> Optional[Path]:
    records = read_metrics(metrics_path)
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, (loss_ax, lr_ax) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 1])
    losses = [r["loss"] for r in records]
    smoothed, average = [], losses[0]
    for value in losses:  # exponential moving average: the trend through per-batch noise
        average = 0.9 * average + 0.1 * value
        smoothed.append(average)
    loss_ax.plot(steps, losses, lw=0.8, color="tab:blue", alpha=0.4, label="train loss")
    loss_ax.plot(steps, smoothed, lw=1.8, color="tab:blue", label="EMA (0.9)")
    evaluated = [(r["step"], r[EVAL_LOSS]) for r in records if r.get(EVAL_LOSS) is not None]
    if evaluated:
        loss_ax.plot(*zip(*evaluated), marker="o", ms=4, lw=1.5, color="tab:green", label="eval loss (held out)")
    loss_ax.set_ylabel("loss")
    loss_ax.grid(alpha=0.3)
    loss_ax.legend()
    lr_ax.plot(steps, [r["lr"] for r in records], lw=1, color="tab:orange")
    lr_ax.set_ylabel("lr")
    lr_ax.set_xlabel("step")
    lr_ax.grid(alpha=0.3)
    fig.suptitle(f"{metrics_path.parent.name}: loss {records[0]['loss']:.3f} -> {records[-1]['loss']:.3f}")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
