"""The training loop every trainer of this project runs, whatever computes a step: steps from the resumed one to
module.train_iters, metrics and the progress bar, checkpoints every module.checkpoint.interval, module.exit_interval,
stop signals the ranks agree on (a Slurm preemption notice first: checkpoint, then stop), the final checkpoint, and a
restarted worker resuming from the job's last checkpoint.

The set-up is the loop's too: setup() takes the device and joins the process group (distributed.py: set_up_rank),
catches the stop signals, then calls the trainer's `set_up_backend()`; init() calls its `build()` (model, optimizer,
data), finds the step to resume (module.checkpoint.resume, `auto` after a restart) and hands it to its
`restore(path)`, then opens the metrics. A trainer subclasses StepLoopTrainer and implements its abstract methods:
those two and `_train_step(step) -> record`, `_eval_step(index) -> loss` (held-out batch `index`, forward only:
module.eval_interval's evaluations) and `save_checkpoint(step)`; `loop_module` (the module config) when its own
is not the job's.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from primus_hydra.backends.base import BaseTrainer
from primus_hydra.backends.common.checkpoint import CheckpointManager
from primus_hydra.backends.common.distributed import set_up_rank
from primus_hydra.backends.common.metrics import MetricsLogger
from primus_hydra.backends.common.tracking import ExperimentTrackers, finish_trackers
from primus_hydra.backends.fault_injection import inject_fault
from primus_hydra.config.model_math import count_parameters
from primus_hydra.errors import CheckpointError, StoppedBySignalError

log = logging.getLogger("primus_hydra.train")

# SIGUSR2 is the preemption / time-limit notice of Slurm jobs (submitit's default; NCCL catches USR1)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2)
_PREEMPTION_CODE = 100  # above every signal number, so that MAX over ranks picks a preemption


def progress_bar(wanted: bool, total: int, start: int):
    """A tqdm bar over the steps (a context giving the bar), or a null context giving None: without a terminal
    (CI, files, pipes) the periodic log lines carry the progress."""
    if not (wanted and sys.stderr.isatty()):
        return contextlib.nullcontext()
    try:
        from tqdm.auto import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm
    except ImportError:
        log.warning("module.log.progress_bar=true but tqdm is not installed: progress comes as log lines")
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(logging_redirect_tqdm())
    bar = stack.enter_context(tqdm(total=total, initial=start, desc="train", unit="step", dynamic_ncols=True))
    return _BarContext(stack, bar)


def restarted_attempt() -> bool:
    """Whether this worker is a restart of the job's (launch.max_restarts): it continues the job's checkpoints and
    metrics."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0


def open_metrics(cfg: Any, module: Any, run_dir: Path, is_main: bool, resuming: bool) -> MetricsLogger:
    """The job's metrics: metrics.jsonl (continued when `resuming`), TensorBoard and the trackers of `logger=`,
    written by the main rank only."""
    logger = cfg.get("logger")
    sinks = [str(sink) for sink in logger.use] if logger is not None else ["tensorboard"]
    trackers = ExperimentTrackers.for_job(cfg, run_dir, resuming) if is_main else None
    return MetricsLogger(run_dir, enabled=is_main, tensorboard=module.log.tensorboard and "tensorboard" in sinks,
                         log_interval=module.log.interval, resuming=resuming, trackers=trackers)


def close_metrics(metrics: Optional[MetricsLogger], cfg: Any, module: Any, run_dir: Path, on_error: bool) -> None:
    """Flush the metrics, draw the loss curve (not after a failure), end the trackers' runs (failed after one)."""
    if metrics is None:
        return
    png = metrics.close(plot=module.log.plot and not on_error)
    if png:
        log.info("loss curve: %s", png)
    if metrics.trackers is not None:
        finish_trackers(metrics.trackers, cfg, run_dir, failed=on_error)


class _BarContext:
    def __init__(self, stack: contextlib.ExitStack, bar):
        self.stack, self.bar = stack, bar

    def __enter__(self):
        return self.bar

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)


class StepLoopTrainer(BaseTrainer):
    stop_signal: Optional[int] = None
    group_of_one = False  # the backend's library needs a process group even in a one-process job

    @property
    def loop_module(self) -> Any:
        """The module config (train_iters, exit_interval, checkpoint.*, log.*): typed or a DictConfig; by default
        the job's own module config."""
        return self.cfg.module

    @property
    def requested_device(self) -> str:
        """platform.device (cpu | cuda | auto) as this trainer reads it; by default the job's own config."""
        return str(self.cfg.platform.device)

    @property
    def checkpoint_root(self) -> Path:
        """The folder of the run's step folders: module.checkpoint.dir, as the job was prepared with it."""
        return Path(self.loop_module.checkpoint.dir)

    # -- what a trainer implements ----------------------------------------------------------------------
    @abstractmethod
    def set_up_backend(self) -> None:
        """After the device, the process group and the stop signals: seeds, the backend's parallel state, its files."""

    @abstractmethod
    def build(self) -> None:
        """Model, optimizer and data, before any checkpoint is read."""

    @abstractmethod
    def restore(self, path: Optional[Path]) -> None:
        """Continue from the verified step `path` (its state loaded, `start_step` set); None: start fresh, from the
        weights of module.checkpoint.load when it names a checkpoint."""

    @abstractmethod
    def _train_step(self, step: int) -> dict[str, Any]:
        """Collective: one training step; its record (step, loss, lr, grad_norm, tokens_per_s, tflops, mfu, ...)."""

    @abstractmethod
    def _eval_step(self, index: int) -> float:
        """The mean loss of held-out global batch `index`, over the data-parallel ranks, on every rank."""

    @abstractmethod
    def save_checkpoint(self, step: int) -> Path:
        """Collective: this step's checkpoint (save_step), its folder."""

    # -- set-up -----------------------------------------------------------------------------------------
    def setup(self) -> None:
        self.device = set_up_rank(self.requested_device, self.dist, float(self.cfg.launch.timeout_s),
                                  group_of_one=self.group_of_one)
        self.catch_stop_signals()
        self.set_up_backend()

    def init(self) -> None:
        self.build()
        module = self.loop_module
        self.checkpoints = CheckpointManager(self.checkpoint_root)
        self.start_step = 0
        resume = self.resume_spec()
        path = self.checkpoint_to_resume(resume)
        self.restore(path)
        if path is not None:
            log.info("resumed from %s at step %d", path, self.start_step)
        # a resumed run or a restarted attempt appends to the job's metrics (readers keep a step's last record),
        # also when no checkpoint was written before the crash and training starts over
        resuming = resume is not None or self.restarted
        self.metrics = open_metrics(self.cfg, module, self.run_dir, self.dist.is_main, resuming)

    # -- set-up helpers -------------------------------------------------------------------------------
    def catch_stop_signals(self) -> None:
        """With module.checkpoint.on_signal, a stop signal ends the run after the step all ranks agree on."""
        self.stop_signal = None
        if self.loop_module.checkpoint.on_signal:
            for signum in STOP_SIGNALS:
                signal.signal(signum, self._remember_signal)

    @property
    def restarted(self) -> bool:
        return restarted_attempt()

    def resume_spec(self) -> Optional[str]:
        """module.checkpoint.resume, or auto for a restarted worker: it continues from the job's last checkpoint."""
        resume = self.loop_module.checkpoint.resume
        if self.restarted and (resume is None or self.checkpoints.step_dirs()):
            return "auto"
        return resume

    def checkpoint_to_resume(self, resume: Optional[str]) -> Optional[Path]:
        """The verified step `resume` names (None: start fresh); a fresh start over earlier checkpoints is refused,
        and the steps `resume=auto` skipped are warned about."""
        overwrite = self.checkpoints.unresumed_failure(resume)
        if overwrite:
            raise CheckpointError(overwrite)
        path, warnings = self.checkpoints.find(resume, "module.checkpoint.resume")
        for line in warnings:
            log.warning("%s", line)
        return path

    def save_step(self, step: int, trainer_state: dict, meta: dict, **save: Any) -> Path:
        """Collective: this step's checkpoint (CheckpointManager.save; `save` passes the model, optimizer or the
        shard writer), its meta stamped (with the model's parameter count, which a resume must match: a changed
        model.* value), fault points wired for the crash tests."""
        meta = {**meta, "parameters": count_parameters(self.cfg.model), "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        path = self.checkpoints.save(step, trainer_state=trainer_state, meta=meta,
                                     fault=lambda point: inject_fault(point, self.dist.rank, step), **save)
        log.info("checkpoint saved: %s", path)
        return path

    # -- the loop ---------------------------------------------------------------------------------------
    def train(self) -> Optional[float]:
        module = self.loop_module
        total, exit_interval, interval = module.train_iters, module.exit_interval, module.checkpoint.interval
        step, loss, saved_step = self.start_step, None, None
        if step >= total:
            log.info("nothing to train: resumed at step %d of %d", step, total)
            return None
        log.info("training steps %d..%d: %d micro-batch(es) of %d x %d tokens per step and data-parallel rank",
                 step + 1, total, self.layout.grad_accum, module.micro_batch_size, module.seq_length)
        with progress_bar(self.dist.is_main and module.log.progress_bar, total, step) as bar:
            while step < total:
                record = self._train_step(step)
                step, loss = record["step"], record["loss"]
                if self._evaluates_after(step, total):
                    record["eval_loss"] = self.evaluate()
                self.metrics.log_step(record, total)
                if bar is not None:
                    bar.set_postfix(loss=f"{loss:.4f}", lr=f"{record['lr']:.2e}", tok_s=f"{record['tokens_per_s']:,.0f}",
                                    refresh=False)
                    bar.update(1)
                inject_fault("step", self.dist.rank, step)
                stop_signal = self._agreed_stop_signal()
                stop_early = bool(exit_interval) and step % exit_interval == 0 and step < total
                if (interval and step % interval == 0) or stop_early or stop_signal:
                    self.save_checkpoint(step)
                    saved_step = step
                if stop_signal:
                    name = signal.Signals(stop_signal).name
                    log.warning("stopping at step %d on %s, after saving its checkpoint", step, name)
                    raise StoppedBySignalError(f"stopped by {name} at step {step}; its checkpoint is in "
                                               f"{self.checkpoints.root}", stop_signal)
                if stop_early:
                    log.info("exit_interval=%d reached: stopping at step %d (resume with module.checkpoint.resume)",
                             exit_interval, step)
                    return loss
        if module.checkpoint.save_final and saved_step != step:
            self.save_checkpoint(step)
        return loss

    # -- evaluation -------------------------------------------------------------------------------------
    def _evaluates_after(self, step: int, total: int) -> bool:
        interval = self.loop_module.eval_interval
        return bool(interval) and (step % interval == 0 or step == total)

    def evaluate(self) -> float:
        """Collective: the mean loss of module.eval_iters held-out global batches (the same batches at every
        evaluation, so that evaluations compare), forward only, on every rank."""
        iters = self.loop_module.eval_iters
        return sum(self._eval_step(index) for index in range(iters)) / iters

    def close_metrics(self, on_error: bool) -> None:
        """Flush the metrics, draw the loss curve (not after a failure) and end the trackers' runs (failed after a
        failure)."""
        metrics, self.metrics = getattr(self, "metrics", None), None
        close_metrics(metrics, self.cfg, self.loop_module, self.run_dir, on_error)

    # -- signals ----------------------------------------------------------------------------------------
    def _remember_signal(self, signum, frame) -> None:
        # A preemption notice (USR2 from Slurm/submitit) says more than the SIGTERM that comes with it: it wins.
        if self.stop_signal != signal.SIGUSR2:
            self.stop_signal = signum

    def _agreed_stop_signal(self) -> Optional[int]:
        """Ranks may see a signal at different steps; they agree (max over ranks, USR2 first) so that all save together."""
        if not self.loop_module.checkpoint.on_signal:
            return None
        code = _PREEMPTION_CODE if self.stop_signal == signal.SIGUSR2 else (self.stop_signal or 0)
        flag = torch.tensor(code, device=self.device)
        if dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        agreed = int(flag.item())
        return signal.SIGUSR2 if agreed == _PREEMPTION_CODE else (agreed or None)
