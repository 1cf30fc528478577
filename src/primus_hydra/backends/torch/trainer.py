"""The native trainer: AdamW, warmup + decay, grad accumulation and clipping, bf16 autocast, atomic checkpoints,
metrics and progress. Seeded and deterministic on CPU: a resumed run reproduces an uninterrupted one bitwise."""
from __future__ import annotations

import contextlib
import gc
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from primus_hydra.backends.base import BaseTrainer
from primus_hydra.backends.torch.checkpoint import CheckpointManager
from primus_hydra.backends.torch.data import TokenBatches
from primus_hydra.backends.torch.metrics import MetricsLogger, measure_matmul_peak_tflops
from primus_hydra.backends.torch.model import build_model_on_meta, materialize
from primus_hydra.backends.torch.optim import build_optimizer, learning_rate
from primus_hydra.config.model_math import training_flops_per_token
from primus_hydra.errors import CheckpointError, PrimusError

log = logging.getLogger("primus_hydra.train")


class TrainingDivergedError(PrimusError):
    exit_code = 3


def resolve_device(requested: str, local_rank: int) -> torch.device:
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise PrimusError("platform.device=cuda but torch sees no GPU (torch.cuda.is_available() is False); use platform.device=cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


class TorchTrainer(BaseTrainer):
    # -- lifecycle --------------------------------------------------------------------------------------
    def setup(self) -> None:
        args = self.backend_args
        self.device = resolve_device(args["device"], self.dist.local_rank)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if args["deterministic"] and self.device.type == "cpu":
            torch.use_deterministic_algorithms(True)
        torch.manual_seed(args["seed"])
        self.autocast_dtype = torch.bfloat16 if args["precision"] == "bf16" else None
        peak = args["peak_tflops_per_device"]
        if peak is None and self.device.type == "cpu":
            peak = measure_matmul_peak_tflops(self.device, self.autocast_dtype or torch.float32)
            log.info("MFU baseline: measured CPU matmul peak %.3f TFLOP/s (set platform.peak_tflops_per_device to override)", peak)
        self.peak_tflops = peak
        log.info("device: %s | precision: %s | torch %s | threads %d", self.device, args["precision"], torch.__version__, torch.get_num_threads())

    def init(self) -> None:
        args = self.backend_args
        model_args = OmegaConf.create(args["model"])
        self.model = materialize(build_model_on_meta(model_args), self.device, args["seed"])
        self.num_parameters = sum(p.numel() for p in self.model.parameters())
        log.info("model %s: %s parameters", model_args.name, f"{self.num_parameters:,}")
        self.step_model = torch.compile(self.model) if args["compile"] else self.model
        opt = args["optimizer"]
        self.optimizer = build_optimizer(self.model, opt["lr"], opt["weight_decay"], (opt["adam_beta1"], opt["adam_beta2"]), opt["adam_eps"])
        data = args["data"]
        self.data = TokenBatches(data["source"], data["path"], data["token_dtype"], model_args.vocab_size, args["seq_length"], args["seed"])
        self.flops_per_token = training_flops_per_token(model_args, args["seq_length"])
        self.start_step = 0
        self.checkpoints = CheckpointManager(Path(args["checkpoint"]["dir"]))
        resume_from = self._restore()
        self.metrics = MetricsLogger(
            self.run_dir, enabled=self.dist.is_main, tensorboard=args["log"]["tensorboard"],
            log_interval=args["log"]["interval"], resuming=resume_from is not None,
        )

    def train(self) -> Optional[float]:
        args = self.backend_args
        total, exit_interval = args["train_iters"], args["exit_interval"]
        interval = args["checkpoint"]["interval"]
        step, loss, saved_step = self.start_step, None, None
        if step >= total:
            log.info("nothing to train: resumed at step %d of %d", step, total)
            return None
        log.info("training steps %d..%d: %d micro-batch(es) of %d x %d tokens per step", step + 1, total,
                 args["grad_accum_steps"], args["micro_batch_size"], args["seq_length"])
        # Objects alive now (config, model, optimizer) stay alive: keep the cyclic GC from rescanning them every
        # few steps (Primus disables GC around train for the same reason).
        gc.collect()
        gc.freeze()
        with self._progress(total, step) as bar:
            while step < total:
                record = self._train_step(step)
                step, loss = record["step"], record["loss"]
                self.metrics.log_step(record, total)
                if bar is not None:
                    bar.set_postfix(loss=f"{loss:.4f}", lr=f"{record['lr']:.2e}", tok_s=f"{record['tokens_per_s']:,.0f}", refresh=False)
                    bar.update(1)
                stop_early = bool(exit_interval) and step % exit_interval == 0 and step < total
                if (interval and step % interval == 0) or stop_early:
                    self.save_checkpoint(step)
                    saved_step = step
                if stop_early:
                    log.info("exit_interval=%d reached: stopping at step %d (resume with module.checkpoint.resume)", exit_interval, step)
                    return loss
        if args["checkpoint"]["save_final"] and saved_step != step:
            self.save_checkpoint(step)
        return loss

    def cleanup(self, on_error: bool = False) -> None:
        gc.unfreeze()
        metrics = getattr(self, "metrics", None)
        if metrics is not None:
            png = metrics.close(plot=self.backend_args["log"]["plot"] and not on_error)
            if png:
                log.info("loss curve: %s", png)
            self.metrics = None

    # -- one step ---------------------------------------------------------------------------------------
    def _train_step(self, step: int) -> dict[str, Any]:
        args, opt = self.backend_args, self.backend_args["optimizer"]
        lr = learning_rate(step, lr=opt["lr"], min_lr=opt["min_lr"], warmup_iters=opt["warmup_iters"],
                           decay_iters=opt["lr_decay_iters"], style=opt["lr_decay_style"])
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        started = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        accum = args["grad_accum_steps"]
        loss_sum = torch.zeros((), device=self.device)
        aux_sum = torch.zeros((), device=self.device)
        for micro in range(accum):
            inputs, targets = self.data.batch(step, micro, args["micro_batch_size"], rank=self.dist.rank)
            inputs, targets = inputs.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)
            with self._autocast():
                logits = self.step_model(inputs)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
            aux = self.model.moe_aux_loss().to(self.device)
            ((loss + aux) / accum).backward()
            loss_sum += loss.detach() / accum
            aux_sum += aux.detach() / accum
        clip = opt["clip_grad"] or float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip, foreach=False)
        self.optimizer.step()
        loss_value, grad_value = loss_sum.item(), grad_norm.item()
        if not math.isfinite(loss_value):
            raise TrainingDivergedError(f"loss is {loss_value} at step {step + 1} (lr {lr:.3e}); lower module.lr or check the data")
        elapsed = time.perf_counter() - started
        tokens = accum * args["micro_batch_size"] * args["seq_length"]
        tflops = self.flops_per_token * tokens / elapsed / 1e12
        record = {
            "step": step + 1, "loss": loss_value, "lr": lr, "grad_norm": grad_value,
            "tokens_per_s": tokens / elapsed, "tflops": tflops,
            "mfu": tflops / self.peak_tflops if self.peak_tflops else None, "step_time_s": elapsed,
        }
        if self.model.args.moe.num_experts:
            record["moe_aux_loss"] = aux_sum.item()
        return record

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def _progress(self, total: int, start: int):
        show = self.dist.is_main and self.backend_args["log"]["progress_bar"] and sys.stderr.isatty()
        if not show:  # periodic log lines carry the progress when there is no terminal (CI, files, pipes)
            return contextlib.nullcontext()
        from tqdm.auto import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        stack = contextlib.ExitStack()
        stack.enter_context(logging_redirect_tqdm())
        bar = stack.enter_context(tqdm(total=total, initial=start, desc="train", unit="step", dynamic_ncols=True))
        return _BarContext(stack, bar)

    # -- checkpoints ------------------------------------------------------------------------------------
    def save_checkpoint(self, step: int) -> Optional[Path]:
        if not self.dist.is_main:
            return None
        states = {
            "model.pt": self.model.state_dict(),
            "optimizer.pt": self.optimizer.state_dict(),
            "trainer_state.pt": {"step": step, "torch_rng": torch.get_rng_state(),
                                 "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
        }
        meta = {"model": self.backend_args["model"]["name"], "backend": "torch", "stage": self.backend_args["stage"],
                "world_size": self.dist.world_size, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        path = self.checkpoints.save(step, states, meta)
        log.info("checkpoint saved: %s", path)
        return path

    def _restore(self) -> Optional[Path]:
        ckpt = self.backend_args["checkpoint"]
        existing = self.checkpoints.steps()
        resume_from = self.checkpoints.resolve(ckpt["resume"], "module.checkpoint.resume")
        if ckpt["resume"] is None and existing:
            raise CheckpointError(
                f"module.checkpoint.dir={self.checkpoints.root} already holds checkpoints (step {existing[-1]}); "
                f"set module.checkpoint.resume=auto to continue from them, or choose another dir"
            )
        if resume_from is not None:
            meta, states = CheckpointManager.load(resume_from, "module.checkpoint.resume", self.device)
            self._load_model_state(states["model.pt"], resume_from)
            self.optimizer.load_state_dict(states["optimizer.pt"])
            trainer_state = states["trainer_state.pt"]
            self.start_step = int(trainer_state["step"])
            torch.set_rng_state(trainer_state["torch_rng"])
            later = [s for s in existing if s > self.start_step]
            if later:
                raise CheckpointError(
                    f"module.checkpoint.dir={self.checkpoints.root} holds steps after the resumed step {self.start_step} "
                    f"({later[0]}...); resume from the latest one or choose another module.checkpoint.dir"
                )
            log.info("resumed from %s at step %d", resume_from, self.start_step)
        elif ckpt["load"] is None and self.backend_args["stage"] == "sft":
            log.warning("module.stage=sft without module.checkpoint.load: fine-tuning starts from random weights")
        elif ckpt["load"]:
            source = self.checkpoints.resolve(ckpt["load"], "module.checkpoint.load")
            _, states = CheckpointManager.load(source, "module.checkpoint.load", self.device)
            self._load_model_state(states["model.pt"], source)
            log.info("initial weights loaded from %s", source)
        return resume_from

    def _load_model_state(self, state: dict, source: Path) -> None:
        try:
            self.model.load_state_dict(state)
        except RuntimeError as error:
            first = str(error).strip().splitlines()[0]
            raise CheckpointError(f"checkpoint {source} does not fit model {self.model.args.name}: {first}") from error


class _BarContext:
    def __init__(self, stack: contextlib.ExitStack, bar):
        self.stack, self.bar = stack, bar

    def __enter__(self):
        return self.bar

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)
