"""backend=megatron_bridge: Megatron-Bridge's own `pretrain()` with a GPTModelProvider of the canonical model
(container.py), in this project's workers. Bridge owns the loop, its checkpoints (`module.checkpoint.dir`) and
its console log; the project supplies the process group, the weights as backend=torch draws them for the seed, the
batches of every other backend, and the job's metrics (metrics.jsonl, TensorBoard, trackers, loss PNG), fed by a
Bridge callback at the end of each step. On the CPU the megatron_bridge.cpu.* patches ran first (setup phase)."""
from __future__ import annotations

import importlib.metadata
import logging
import math
import time
from pathlib import Path
from typing import Any, Optional

from megatron.bridge.training.callbacks import Callback
from megatron.bridge.training.gpt_step import forward_step
from megatron.bridge.training.pretrain import pretrain

from primus_hydra.backends.base import BaseTrainer
from primus_hydra.backends.common.distributed import destroy_parallel_state, set_up_rank
from primus_hydra.backends.common.hf_folder import is_hf_folder
from primus_hydra.backends.common.metrics import MetricsLogger
from primus_hydra.backends.common.step_loop import close_metrics, open_metrics, restarted_attempt
from primus_hydra.backends.megatron.core_config import quiet_library_logs
from primus_hydra.backends.megatron.native_init import init_like_native
from primus_hydra.backends.megatron_bridge.container import config_container
from primus_hydra.backends.megatron_bridge.cpu_patches import cpu_support_failure
from primus_hydra.config.model_math import training_flops_per_token
from primus_hydra.errors import PrimusError, TrainingDivergedError

log = logging.getLogger("primus_hydra.megatron_bridge")


class StepRecords(Callback):
    """One metrics record per Bridge step (the step's lr is read before it, as every trainer of this project logs
    it); a non-finite loss stops the run in one line."""

    def __init__(self, metrics: Optional[MetricsLogger], total_steps: int, tokens_per_step: int, flops_per_token: float,
                 world_size: int):
        self.metrics, self.total_steps, self.tokens_per_step = metrics, total_steps, tokens_per_step
        self.flops_per_token, self.world_size = flops_per_token, world_size
        self.last_loss: Optional[float] = None
        self._lr, self._started = 0.0, 0.0

    def on_train_start(self, context: Any) -> None:
        parameters = [param for chunk in context.model for param in chunk.parameters()]
        trained = sum(param.numel() for param in parameters if param.requires_grad)
        total = sum(param.numel() for param in parameters)
        if trained < total:  # module.peft: the adapters train, the base weights stay as loaded
            log.info("parameters this rank trains: %s of %s (the rest frozen)", f"{trained:,}", f"{total:,}")

    def on_train_step_start(self, context: Any) -> None:
        self._lr = float(context.optimizer.param_groups[0]["lr"])
        self._started = time.perf_counter()

    def on_train_step_end(self, context: Any) -> None:
        elapsed = time.perf_counter() - self._started
        step = context.state.train_state.step + 1  # Bridge counts the step after its callbacks
        losses = context.loss_dict or {}
        loss = float(losses["lm loss"]) if "lm loss" in losses else math.nan  # reduced over dp on the last stage
        if not math.isfinite(loss) and "lm loss" in losses:
            raise TrainingDivergedError(f"loss is {loss} at step {step} (lr {self._lr:.3e}); lower module.lr or check the data")
        self.last_loss = loss
        if self.metrics is None:
            return
        tflops = self.flops_per_token * self.tokens_per_step / self.world_size / elapsed / 1e12
        self.metrics.log_step({"step": step, "loss": loss, "lr": self._lr,
                               "grad_norm": float(context.grad_norm) if context.grad_norm is not None else None,
                               "tokens_per_s": self.tokens_per_step / elapsed, "tflops": tflops, "mfu": None,
                               "step_time_s": elapsed}, self.total_steps)


class MegatronBridgeTrainer(BaseTrainer):
    backend_args: dict

    def setup(self) -> None:
        self.device = set_up_rank(str(self.cfg.platform.device), self.dist, float(self.cfg.launch.timeout_s),
                                  group_of_one=True)  # Bridge finds the group up and keeps it
        if self.device.type == "cpu":
            failure = cpu_support_failure(importlib.metadata.version("megatron-bridge"))
            if failure:
                raise PrimusError(failure)
        quiet_library_logs()

    def init(self) -> None:
        model, module = self.cfg.model, self.cfg.module
        load = module.checkpoint.load
        hf_folder = Path(str(load)).expanduser() if load and is_hf_folder(Path(str(load))) else None

        def init_weights(chunks: list) -> list:
            for chunk in chunks:  # any layout: the weights backend=torch draws for the seed
                init_like_native(chunk, model, module.seed)
            if hf_folder is not None:  # Bridge's own converter, for the HF architecture the folder names
                from megatron.bridge import AutoBridge

                AutoBridge.from_hf_pretrained(str(hf_folder)).load_hf_weights(chunks)
                log.info("initial weights loaded from the Hugging Face folder %s (Megatron-Bridge's AutoBridge)", hf_folder)
            return chunks

        self.container = config_container(self.cfg, self.backend_args, self.run_dir, self.device.type, self.dist.rank,
                                          init_weights)
        checkpoint = self.container.checkpoint
        if restarted_attempt() and checkpoint.save:  # a restarted attempt continues from the job's last save
            checkpoint.load = checkpoint.save
        resuming = bool(checkpoint.load) or restarted_attempt()
        self.metrics = open_metrics(self.cfg, module, self.run_dir, self.dist.is_main, resuming)
        self.records = StepRecords(self.metrics, module.train_iters, module.global_batch_size * module.seq_length,
                                   training_flops_per_token(model, module.seq_length), self.layout.world_size)

    def train(self) -> Optional[float]:
        module = self.cfg.module
        log.info("Megatron-Bridge pretrain(): steps 1..%d, %d micro-batch(es) of %d x %d tokens per step and "
                 "data-parallel rank", module.train_iters, self.layout.grad_accum, module.micro_batch_size,
                 module.seq_length)
        pretrain(self.container, forward_step, callbacks=[self.records])
        return self.records.last_loss

    def cleanup(self, on_error: bool = False) -> None:
        metrics, self.metrics = getattr(self, "metrics", None), None
        close_metrics(metrics, self.cfg, self.cfg.module, self.run_dir, on_error)
        if not on_error:
            from megatron.core import parallel_state

            parallel_state.destroy_model_parallel()
            destroy_parallel_state()
