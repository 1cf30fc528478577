"""The native trainer: AdamW, warmup + decay, grad accumulation and clipping, bf16 autocast, DDP / FSDP2 / TP /
PP through torch's own APIs, sharded atomic checkpoints, metrics and progress. Seeded and deterministic on CPU:
a resumed run reproduces an uninterrupted one bitwise, and every parallel layout the single-process loss curve."""
from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path
from typing import Any, Optional

import torch

from primus_hydra.backends.common.checkpoint import CheckpointManager
from primus_hydra.backends.common.checkpoint_paths import megatron_iteration_folder, step_of
from primus_hydra.backends.common.data import TokenBatches, token_loss
from primus_hydra.backends.common.distributed import (
    clip_grad_norm,
    destroy_parallel_state,
    init_parallel_state,
    mean_over_data_parallel,
    reshard_after_forward_only,
)
from primus_hydra.backends.common.foreign_checkpoints import weights_in_native_format
from primus_hydra.backends.common.hf_folder import is_hf_folder
from primus_hydra.backends.common.lora_weights import peft_meta
from primus_hydra.backends.common.metrics import MfuBaseline, cpu_matmul_peak_tflops
from primus_hydra.backends.common.peak_memory import PeakMemory
from primus_hydra.backends.common.step_loop import StepLoopTrainer
from primus_hydra.backends.torch.args import TorchTrainingArgs
from primus_hydra.backends.torch.lora import add_lora
from primus_hydra.backends.torch.model import build_model_on_meta, materialize
from primus_hydra.backends.torch.moe import balance_over_data_parallel
from primus_hydra.backends.torch.optim import build_optimizer, learning_rate
from primus_hydra.backends.torch.parallelize import shard, wrap_data_parallel
from primus_hydra.config.model_math import count_parameters, training_flops_per_token
from primus_hydra.errors import CheckpointError, TrainingDivergedError

log = logging.getLogger("primus_hydra.train")


def use_deterministic_algorithms(compiled: bool) -> None:
    """torch.use_deterministic_algorithms(True), less its import of torch._inductor (and with it dynamo: 1.2 s of
    every run's start) when nothing is compiled: it imports inductor only to set inductor's own flag, then sets the
    one torch's kernels read, which is all an uncompiled run needs."""
    if compiled:
        torch.use_deterministic_algorithms(True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=False)


class TorchTrainer(StepLoopTrainer):
    backend_args: TorchTrainingArgs

    @property
    def loop_module(self):
        return self.backend_args.module

    @property
    def requested_device(self) -> str:  # its typed arguments, as a build_args patch may have changed them
        return str(self.backend_args.device)

    # -- lifecycle --------------------------------------------------------------------------------------
    def set_up_backend(self) -> None:
        args, module = self.backend_args, self.backend_args.module
        if args.deterministic and self.device.type == "cpu":
            use_deterministic_algorithms(compiled=bool(module.compile))
        torch.manual_seed(module.seed)
        self.parallel = init_parallel_state(args.layout, self.device, self.dist, args.timeout_s)
        self.autocast_dtype = torch.bfloat16 if module.precision == "bf16" else None
        peak, measured_dtype = args.peak_tflops_per_device, None
        if peak is None and self.device.type == "cpu":
            measured_dtype = self.autocast_dtype or torch.float32
            peak = cpu_matmul_peak_tflops(measured_dtype)
            log.info("MFU baseline: measured CPU matmul peak %.3f TFLOP/s (set platform.peak_tflops_per_device to override)", peak)
        self.mfu_baseline = MfuBaseline(peak, measured_dtype=measured_dtype, remeasure=self.dist.is_main)
        self.peak_memory = PeakMemory(self.device, args.measure_memory)
        # before the model is built: on the CPU it counts allocations from here; after the matmul-peak measurement
        # (its 1024x1024 matrices, when this thread count is not cached yet, are not the job's memory)
        self.peak_memory.start()
        layout = args.layout
        log.info("device: %s | precision: %s | torch %s | threads %d | layout: world %d = pp %d x dp %d x tp %d%s",
                 self.device, module.precision, torch.__version__, torch.get_num_threads(), layout.world_size,
                 layout.pp, layout.dp, layout.tp, " (fsdp)" if layout.fsdp else "")

    def build(self) -> None:
        args, module = self.backend_args, self.backend_args.module
        # built on the meta device and split by the layout; then each rank makes storage and weights for its own
        # shards only (the same values whatever the layout: weights.py), and DDP wraps where ranks hold replicas
        self.model = shard(build_model_on_meta(args.model), self.parallel)
        balance_over_data_parallel(self.model, self.parallel.dp_group, self.layout.dp)  # global_aux_loss: over dp
        if self.starts_from_hf:  # restore() reads every weight from the folder: drawing them first is wasted time
            self.model.to_empty(device=self.device)
        else:
            materialize(self.model, self.device, module.seed)
        log.info("model %s: %s parameters", args.model.name, f"{count_parameters(args.model):,}")
        # module.peft: the adapters come after the base weights (restore), and DDP and the optimizer after them
        self.train_module = self.optimizer = None
        if not module.peft.method:
            self._wrap_and_optimize()
        self.data = TokenBatches.for_module(module, args.model.vocab_size)
        self.pipeline = None
        if args.layout.pp > 1:  # torch.distributed.pipelining costs ~0.4 s to import: only when used
            from primus_hydra.backends.torch.pipeline import PipelineRunner

            self.pipeline = PipelineRunner(self.model, self.parallel, self.device, str(module.parallel.pp_schedule),
                                           module.micro_batch_size)
        self.flops_per_token = training_flops_per_token(args.model, module.seq_length)

    def _wrap_and_optimize(self) -> None:
        module = self.backend_args.module
        self.train_module = wrap_data_parallel(self.model, self.parallel)
        if module.compile:
            self.train_module = torch.compile(self.train_module)
        self.optimizer = build_optimizer(self.model, module.lr, module.weight_decay,
                                         (module.adam_beta1, module.adam_beta2), module.adam_eps)

    def _add_adapters(self) -> None:
        """module.peft.method=lora: adapters on the loaded base weights, the base frozen; then DDP and the optimizer
        (over the adapters only)."""
        module = self.backend_args.module
        trained, total = add_lora(self.model, module.peft, module.seed)
        log.info("LoRA (rank %d, alpha %g) on %s: this rank trains %s of %s parameters (the rest frozen)",
                 module.peft.rank, module.peft.alpha, ", ".join(module.peft.target_modules), f"{trained:,}", f"{total:,}")
        self._wrap_and_optimize()

    @property
    def starts_from_hf(self) -> bool:
        """module.checkpoint.load names a Hugging Face folder (a resumed run loads its own checkpoint instead, which
        holds every weight as well)."""
        load = self.backend_args.module.checkpoint.load
        return bool(load) and is_hf_folder(Path(load))

    def cleanup(self, on_error: bool = False) -> None:
        self.close_metrics(on_error)
        if not on_error:  # after a failure, peers may be gone: tearing the group down could block
            # Drop what holds the process group (DDP's reducer) while the group is still registered, so that
            # the group is freed by destroy_parallel_state and not by a Python dealloc (see its docstring).
            self.train_module = self.model = self.optimizer = self.pipeline = None
            destroy_parallel_state()

    # -- one step ---------------------------------------------------------------------------------------
    def _train_step(self, step: int) -> dict[str, Any]:
        args, module = self.backend_args, self.backend_args.module
        lr = learning_rate(step, lr=module.lr, min_lr=module.min_lr, warmup_iters=module.warmup_iters,
                           decay_iters=args.lr_decay_iters, style=str(module.lr_decay_style))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.peak_memory.before_step()
        started = time.perf_counter()
        self.train_module.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.pipeline is not None:
            loss_sum, aux_sum = self.pipeline.step(self.data, step)
        else:
            loss_sum, aux_sum = self._forward_backward(step)
        grad_norm = clip_grad_norm(self.model.parameters(), module.clip_grad, self.parallel)
        self.optimizer.step()
        loss_value = mean_over_data_parallel(loss_sum, self.parallel).item()
        if not math.isfinite(loss_value):
            raise TrainingDivergedError(f"loss is {loss_value} at step {step + 1} (lr {lr:.3e}); lower module.lr or check the data")
        elapsed = time.perf_counter() - started
        batch_tokens = module.global_batch_size * module.seq_length
        tflops = self.flops_per_token * batch_tokens / args.layout.world_size / elapsed / 1e12  # per rank, as MFU is
        record = {
            "step": step + 1, "loss": loss_value, "lr": lr, "grad_norm": grad_norm,
            "tokens_per_s": batch_tokens / elapsed, "tflops": tflops, "mfu": self.mfu_baseline.mfu(tflops, step + 1),
            "step_time_s": elapsed,
        }
        peaks = self.peak_memory.after_step()
        if peaks is not None:
            record["peak_memory_gib"] = max(peaks)
            record["peak_memory_gib_per_rank"] = peaks
        if args.model.moe.num_experts:
            record["moe_aux_loss"] = mean_over_data_parallel(aux_sum, self.parallel).item()
        return record

    def _forward_backward(self, step: int, data: Any = None, backward: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradient accumulation over this data-parallel rank's micro-batches of `data` (default: the training
        batches); returns (mean loss, mean aux loss). backward=False: forward only (an evaluation)."""
        data = data if data is not None else self.data
        accum, micro_batch = self.backend_args.layout.grad_accum, self.backend_args.module.micro_batch_size
        loss_sum = torch.zeros((), device=self.device)
        aux_sum = torch.zeros((), device=self.device)
        for micro in range(accum):
            first = (self.parallel.dp_rank * accum + micro) * micro_batch
            batch = data.batch(step, first, micro_batch)
            inputs, targets = (part.to(self.device, non_blocking=True) for part in batch)
            # packed conversations: attention within each (the pipeline's stages pass none: a launch warning says so)
            documents = None if batch.documents is None else batch.documents.to(self.device, non_blocking=True)
            sync = micro == accum - 1 or not backward  # DDP: all-reduce gradients once, after the last micro-batch
            with self._no_sync(sync), self._autocast():
                logits = self.train_module(inputs, documents=documents)
            loss = token_loss(logits, targets, getattr(data, "masked", False))
            aux = self.model.moe_aux_loss().to(self.device)
            if backward:
                with self._no_sync(sync):
                    ((loss + aux) / accum).backward()
            loss_sum += loss.detach() / accum
            aux_sum += aux.detach() / accum
        return loss_sum, aux_sum

    def _eval_step(self, index: int) -> float:
        held_out = self.data.held_out_batches()
        self.train_module.eval()
        with torch.no_grad():
            if self.pipeline is not None:
                loss_sum = self.pipeline.evaluate(held_out, index)
            else:
                loss_sum, _ = self._forward_backward(index, held_out, backward=False)
        reshard_after_forward_only([self.model])
        return mean_over_data_parallel(loss_sum, self.parallel).item()

    def _no_sync(self, sync: bool):
        no_sync = getattr(self.train_module, "no_sync", None)
        return contextlib.nullcontext() if sync or no_sync is None else no_sync()

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    # -- checkpoints ------------------------------------------------------------------------------------
    def save_checkpoint(self, step: int) -> Path:
        trainer_state = {"step": step, "torch_rng": torch.get_rng_state(),
                         "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        args, layout = self.backend_args, self.backend_args.layout
        meta = {"model": args.model.name, "backend": "torch", "stage": str(args.module.stage),
                "world_size": layout.world_size,
                "layout": {"pp": layout.pp, "dp": layout.dp, "tp": layout.tp, "fsdp": layout.fsdp}}
        if args.module.peft.method:  # the adapters sit beside the frozen weights: task=export merges them
            meta["peft"] = peft_meta(args.module.peft)
        return self.save_step(step, trainer_state, meta, model=self.model, optimizer=self.optimizer)

    def restore(self, path: Optional[Path]) -> None:
        ckpt = self.backend_args.module.checkpoint
        model_name, key = self.backend_args.model.name, "module.checkpoint.resume"
        adapters = bool(self.backend_args.module.peft.method)
        if path is not None:
            if adapters:  # the run's own checkpoint holds the adapters and their optimizer state
                self._add_adapters()
            trainer_state = CheckpointManager.load(path, key, self.model, self.optimizer, model_name)
            self.start_step = int(trainer_state["step"])
            torch.set_rng_state(trainer_state["torch_rng"])
            if trainer_state.get("cuda_rng") and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(trainer_state["cuda_rng"])
            later = [p.name for p in self.checkpoints.step_dirs() if step_of(p.name) > self.start_step]
            if later:
                raise CheckpointError(
                    f"module.checkpoint.dir={self.checkpoints.root} holds steps after the resumed step {self.start_step} "
                    f"({later[0]}...); resume from the latest one or choose another module.checkpoint.dir"
                )
        elif ckpt.load is None and self.backend_args.module.stage == "sft":
            log.warning("module.stage=sft without module.checkpoint.load: fine-tuning starts from random weights")
        elif self.starts_from_hf:  # checked before launch (run_dir_checks.hf_load_failures)
            from primus_hydra.backends.common.hf_checkpoint import load_hf_into_native  # safetensors: the hf extra

            load_hf_into_native(Path(ckpt.load).expanduser(), self.model)
            log.info("initial weights loaded from the Hugging Face folder %s", ckpt.load)
        elif ckpt.load and megatron_iteration_folder(Path(ckpt.load)) is not None:  # Megatron-LM's or Bridge's save
            source = megatron_iteration_folder(Path(ckpt.load))
            with weights_in_native_format(source, self.run_dir, self.backend_args.model, backend="megatron") as weights:
                CheckpointManager.load(weights, "module.checkpoint.load", self.model, None, model_name)
            log.info("initial weights loaded from the Megatron-format checkpoint %s", source)
        elif ckpt.load:
            source, _ = self.checkpoints.find(ckpt.load, "module.checkpoint.load")
            with weights_in_native_format(source, self.run_dir, self.backend_args.model) as weights:
                CheckpointManager.load(weights, "module.checkpoint.load", self.model, None, model_name)
            log.info("initial weights loaded from %s", source)
        if adapters and path is None:  # on the base weights just loaded (or drawn)
            self._add_adapters()
