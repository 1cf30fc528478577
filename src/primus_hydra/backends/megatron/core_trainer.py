"""backend.trainer=core: this project's training loop on megatron-core's own classes.

GPTModel from the translated arguments (core_model.py), model-parallel state from module.parallel (tp, pp, cp, ep,
sequence parallel), megatron DDP + its (distributed) optimizer, `get_forward_backward_func` for the pipeline
schedules, `OptimizerParamScheduler` for the lr, batches from megatron.core.datasets or the native backend's own
(datasets.py), and the shared rails (backends/common): metrics.jsonl / TensorBoard / loss PNG, the progress bar, and
atomic checksummed step folders (CheckpointManager) whose shards megatron-core's dist_checkpointing writes, so a
checkpoint reshards across layouts. `module.checkpoint.load` also takes a native (backend=torch) checkpoint or a
Hugging Face folder: their weights are converted on load (convert.py, sharded_weights.py).
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist

from primus_hydra.backends.common.checkpoint import describe_failure
from primus_hydra.backends.common.checkpoint_paths import TRAINER_STATE, read_meta
from primus_hydra.backends.common.distributed import destroy_parallel_state
from primus_hydra.backends.common.foreign_checkpoints import model_object, weights_in_native_format
from primus_hydra.backends.common.hf_folder import is_hf_folder
from primus_hydra.backends.common.step_loop import StepLoopTrainer
from primus_hydra.backends.megatron.checkpoint_strategy import (
    give_optimizer_state_for_loading,
    in_process_save_strategy,
)
from primus_hydra.backends.megatron.core_config import quiet_library_logs
from primus_hydra.backends.megatron.core_model import build_gpt_model
from primus_hydra.backends.megatron.cpu_patches import cpu_support_failure
from primus_hydra.backends.megatron.datasets import training_batches
from primus_hydra.backends.megatron.lr_schedule import build_lr_scheduler
from primus_hydra.backends.megatron.native_init import init_like_native
from primus_hydra.backends.megatron.pipeline_layout import layout_stages
from primus_hydra.backends.megatron.pipeline_layout import virtual_stages as layout_virtual_stages
from primus_hydra.backends.megatron.sharded_weights import load_full_weights, native_weights_for
from primus_hydra.config.model_math import count_parameters, training_flops_per_token
from primus_hydra.errors import CheckpointError, PrimusError, TrainingDivergedError

log = logging.getLogger("primus_hydra.megatron")


def virtual_stages(args: dict) -> int:
    """Virtual pipeline stages per pipeline rank (Megatron's --num-virtual-stages-per-pipeline-rank, or what its
    --pipeline-model-parallel-layout makes); 1: none."""
    layout = args.get("pipeline_model_parallel_layout")
    if layout is not None:
        return layout_virtual_stages(layout_stages(layout), int(args["pipeline_model_parallel_size"]))
    return int(args.get("num_virtual_stages_per_pipeline_rank") or 1)


class MegatronCoreTrainer(StepLoopTrainer):
    backend_args: dict
    group_of_one = True  # megatron-core's parallel state is built on a process group

    @property
    def checkpoint_root(self) -> Path:
        """Megatron's `save`: module.checkpoint.dir, or extra_args.save."""
        return Path(self.backend_args.get("save") or self.cfg.module.checkpoint.dir)

    # -- lifecycle --------------------------------------------------------------------------------------
    def set_up_backend(self) -> None:
        from megatron.core import parallel_state, tensor_parallel

        if self.device.type == "cpu":
            import importlib.metadata

            failure = cpu_support_failure(importlib.metadata.version("megatron-core"))
            if failure:
                raise PrimusError(failure)
        quiet_library_logs()
        module, args = self.cfg.module, self.backend_args
        torch.manual_seed(module.seed)
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=args["tensor_model_parallel_size"],
            pipeline_model_parallel_size=args["pipeline_model_parallel_size"],
            context_parallel_size=args["context_parallel_size"],
            expert_model_parallel_size=args["expert_model_parallel_size"],
            virtual_pipeline_model_parallel_size=virtual_stages(args) if virtual_stages(args) > 1 else None,
        )
        tensor_parallel.model_parallel_cuda_manual_seed(module.seed)
        self.parallel = parallel_state
        log.info("megatron-core: device %s | layout: world %d = pp %d x dp %d x cp %d x tp %d, ep %d%s",
                 self.device, self.layout.world_size, self.layout.pp, self.layout.dp, self.layout.cp, self.layout.tp,
                 self.layout.ep, " | sequence parallel" if args.get("sequence_parallel") else "")

    def build(self) -> None:
        from megatron.core.distributed import (
            DistributedDataParallel,
            DistributedDataParallelConfig,
            finalize_model_grads,
        )
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        if self.device.type == "cpu":
            # gloo matches point-to-point messages between two ranks by order only: a batch that sends activations
            # forward and gradients back to the same peer (an interleaved pipeline over 2 ranks) crosses them
            self.backend_args = {**self.backend_args, "batch_p2p_comm": False}
        args, module = self.backend_args, self.cfg.module
        # one model chunk per virtual pipeline stage of this rank (one without virtual stages)
        self.chunks = [self._build_chunk(stage) for stage in range(virtual_stages(args))]
        self.model = self.chunks[0]
        held = sum(param.numel() for chunk in self.chunks for param in chunk.parameters())
        log.info("model %s: %s parameters (megatron-core GPTModel); this rank holds %s", self.cfg.model.name,
                 f"{count_parameters(self.cfg.model):,}", f"{held:,}")
        if self.layout.pp > 1:  # which layers each model chunk (virtual stage) of this rank builds, 1-based
            log.info("pipeline rank %d: transformer layers %s", self.parallel.get_pipeline_model_parallel_rank(),
                     " | ".join(",".join(str(layer.layer_number) for layer in chunk.decoder.layers) or "-"
                                for chunk in self.chunks))
        config = self.model.config
        ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                                   use_distributed_optimizer=bool(args.get("use_distributed_optimizer")))
        # as Megatron-LM: only the first chunk's gradients are bucketed (the others overlap nothing on one stream)
        self.ddp = [DistributedDataParallel(config, ddp_config, chunk, disable_bucketing=index > 0)
                    for index, chunk in enumerate(self.chunks)]
        self.optimizer = get_megatron_optimizer(OptimizerConfig(
            optimizer="adam", lr=args["lr"], min_lr=args["min_lr"], weight_decay=args["weight_decay"],
            adam_beta1=args["adam_beta1"], adam_beta2=args["adam_beta2"], adam_eps=args["adam_eps"],
            clip_grad=args["clip_grad"], bf16=bool(args.get("bf16")), params_dtype=config.params_dtype,
            use_distributed_optimizer=bool(args.get("use_distributed_optimizer"))), self.ddp)
        # what Megatron-LM's training loop wires: the schedule reduces gradients over dp (and sequence-parallel norm
        # gradients over tp) through finalize_model_grads, scales the loss for mixed precision, and skips the
        # gradient sync on all but the last micro-batch
        config.finalize_model_grads_func = finalize_model_grads
        config.grad_scale_func = self.optimizer.scale_loss
        config.no_sync_func = [ddp.no_sync for ddp in self.ddp] if len(self.ddp) > 1 else self.ddp[0].no_sync
        self.scheduler = build_lr_scheduler(self.optimizer, args)
        self.data = training_batches(self.cfg, self.run_dir, self.dist.rank)
        self.flops_per_token = training_flops_per_token(self.cfg.model, module.seq_length)

    def cleanup(self, on_error: bool = False) -> None:
        self.close_metrics(on_error)
        if not on_error:
            from megatron.core import parallel_state

            self.ddp = self.model = self.chunks = self.optimizer = None
            parallel_state.destroy_model_parallel()
            destroy_parallel_state()

    def _build_chunk(self, stage: int) -> Any:
        """This rank's model for virtual pipeline stage `stage`: its layers, embedding on the very first, output
        layer on the very last; weights as backend=torch draws them for the seed (any layout, the same weights)."""
        args, ps, stages = self.backend_args, self.parallel, virtual_stages(self.backend_args)
        vp_stage = stage if stages > 1 else None
        chunk = build_gpt_model(args, device_type=self.device.type, vp_stage=vp_stage,
                                pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                                post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage))
        if not self.cfg.model.mla.enabled:  # multi-latent attention keeps megatron-core's own init
            init_like_native(chunk, self.cfg.model, self.cfg.module.seed)
        return chunk.cuda(self.device) if self.device.type == "cuda" else chunk

    def _data_iterators(self, step: int, data: Any = None) -> Any:
        """One iterator over the step's micro-batches per model chunk (each chunk's forward reads one per call)."""
        if len(self.chunks) == 1:
            return self._micro_batches(step, data)
        return [self._micro_batches(step, data) for _ in self.chunks]

    # -- one step ---------------------------------------------------------------------------------------
    def _micro_batches(self, step: int, data: Any = None) -> Iterator[dict[str, torch.Tensor]]:
        """This data-parallel rank's micro-batches of the step: sequences (dp_rank * accum + index) * micro ... of
        the step's global batch, whatever the layout (datasets.py); of the training batches unless `data` is given."""
        data = data if data is not None else self.data
        accum, micro = self.layout.grad_accum, self.cfg.module.micro_batch_size
        dp_rank = self.parallel.get_data_parallel_rank()
        for index in range(accum):
            batch = data.micro_batch(step, (dp_rank * accum + index) * micro, micro)
            yield {key: value.to(self.device) for key, value in batch.items()}

    def _eval_step(self, index: int) -> float:
        """Held-out batch `index` through megatron-core's schedule, forward only (what Megatron-LM's evaluate does)."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        module = self.cfg.module
        for chunk in self.ddp:
            chunk.eval()
        try:
            with torch.no_grad():
                outputs = get_forward_backward_func()(
                    forward_step_func=self._forward_step, data_iterator=self._data_iterators(index, self.data.held_out()),
                    model=self.ddp, num_microbatches=self.layout.grad_accum, seq_length=module.seq_length,
                    micro_batch_size=module.micro_batch_size, forward_only=True)
        finally:
            for chunk in self.ddp:
                chunk.train()
        return self._reported_loss(outputs)

    @staticmethod
    def _forward_step(batches: Iterator[dict[str, torch.Tensor]], model: Any):
        batch = next(batches)
        positions = batch.get("position_ids")
        if positions is None:  # the native batches: positions 0..seq-1 (a learned_absolute table reads them)
            tokens = batch["tokens"]
            positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        per_token = model(batch["tokens"], positions, None, labels=batch["labels"])
        mask = batch.get("loss_mask")

        def loss_function(output: torch.Tensor):
            if mask is None:
                loss = output.float().mean()
            else:  # megatron.core.datasets' mask: tokens it pads are not learned from
                loss = (output.float() * mask).sum() / mask.sum().clamp(min=1)
            return loss, {"lm loss": loss.detach().clone()}  # the schedule divides `loss` in place by the micro-batches

        return per_token, loss_function

    def _train_step(self, step: int) -> dict[str, Any]:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        module = self.cfg.module
        started = time.perf_counter()
        for ddp in self.ddp:
            ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        lr = self.optimizer.param_groups[0]["lr"]
        outputs = get_forward_backward_func()(
            forward_step_func=self._forward_step, data_iterator=self._data_iterators(step), model=self.ddp,
            num_microbatches=self.layout.grad_accum, seq_length=module.seq_length,
            micro_batch_size=module.micro_batch_size, forward_only=False)
        _, grad_norm, _ = self.optimizer.step()
        self.scheduler.step(increment=1)
        loss = self._reported_loss(outputs)
        if not math.isfinite(loss):
            raise TrainingDivergedError(f"loss is {loss} at step {step + 1} (lr {lr:.3e}); lower module.lr or check the data")
        elapsed = time.perf_counter() - started
        batch_tokens = module.global_batch_size * module.seq_length
        tflops = self.flops_per_token * batch_tokens / self.layout.world_size / elapsed / 1e12
        return {"step": step + 1, "loss": loss, "lr": lr, "grad_norm": float(grad_norm) if grad_norm is not None else None,
                "tokens_per_s": batch_tokens / elapsed, "tflops": tflops, "mfu": None, "step_time_s": elapsed}

    def _reported_loss(self, outputs: list[dict]) -> float:
        """The step's mean loss on every rank: the last pipeline stage's micro-batch mean, averaged over dp."""
        ps = self.parallel
        local = torch.stack([out["lm loss"] for out in outputs]).mean() if outputs else torch.zeros((), device=self.device)
        value = local.to(self.device, torch.float32).reshape(1)
        if ps.get_pipeline_model_parallel_world_size() > 1:
            dist.all_reduce(value, group=ps.get_pipeline_model_parallel_group())  # other stages hold 0
        if ps.get_data_parallel_world_size() > 1:
            dist.all_reduce(value, group=ps.get_data_parallel_group())
            value /= ps.get_data_parallel_world_size()
        return float(value.item())

    # -- checkpoints ------------------------------------------------------------------------------------
    def _sharded_state(self, for_loading: bool) -> dict:
        """Model and optimizer as megatron-core sharded tensors; the optimizer state `fully_reshardable`, so that a
        step written at one layout (dp, tp, pp, ep) resumes at another."""
        metadata = {"distrib_optim_sharding_type": "fully_reshardable"}
        if for_loading:
            give_optimizer_state_for_loading(self.optimizer)
        model_state = self._model_state(metadata)
        return {**model_state,
                "optimizer": self.optimizer.sharded_state_dict(model_state, is_loading=for_loading, metadata=metadata)}

    def _model_state(self, metadata: Optional[dict]) -> dict:
        """Megatron-LM's layout: `model`, or `model0`, `model1`, ... with virtual pipeline stages."""
        kwargs = {"metadata": metadata} if metadata is not None else {}
        if len(self.chunks) == 1:
            return {"model": self.model.sharded_state_dict(**kwargs)}
        return {f"model{index}": chunk.sharded_state_dict(**kwargs) for index, chunk in enumerate(self.chunks)}

    def _load_model_state(self, state: dict) -> None:
        for name, chunk in zip(self._model_state_names(), self.chunks):
            chunk.load_state_dict(state[name])

    def _model_state_names(self) -> list[str]:
        return ["model"] if len(self.chunks) == 1 else [f"model{index}" for index in range(len(self.chunks))]

    def save_checkpoint(self, step: int) -> Path:
        from megatron.core import dist_checkpointing

        def write_shards(tmp: Path) -> dict:
            dist_checkpointing.save(self._sharded_state(for_loading=False), str(tmp),
                                    sharded_strategy=in_process_save_strategy())
            return {}  # files written by dist_checkpointing: rank 0 records them (size, checksum) before the rename

        trainer_state = {"step": step, "torch_rng": torch.get_rng_state(), "scheduler": self.scheduler.state_dict()}
        meta = {"model": self.cfg.model.name, "backend": "megatron", "format": "megatron.core.dist_checkpointing",
                "stage": str(self.cfg.module.stage), "world_size": self.layout.world_size,
                "layout": {"pp": self.layout.pp, "dp": self.layout.dp, "tp": self.layout.tp, "ep": self.layout.ep}}
        return self.save_step(step, trainer_state, meta, model=None, optimizer=None, write_shards=write_shards)

    def restore(self, path: Optional[Path]) -> None:
        ckpt = self.cfg.module.checkpoint
        if path is not None:
            self._load_megatron(path, "module.checkpoint.resume", with_optimizer=True)
            return
        if not ckpt.load:
            return
        if is_hf_folder(Path(ckpt.load)):  # checked before launch (run_dir_checks.hf_load_failures)
            from primus_hydra.backends.megatron.hf_weights import HfMegatronWeights  # safetensors: the hf extra

            source = Path(ckpt.load).expanduser()
            with HfMegatronWeights(source, model_object(self.cfg.model), self.model.vocab_size) as weights:
                for chunk in self.chunks:
                    load_full_weights(chunk, weights)
        else:
            source, _ = self.checkpoints.find(ckpt.load, "module.checkpoint.load")
            if read_meta(source)[0].get("backend") == "megatron":
                self._load_megatron(source, "module.checkpoint.load", with_optimizer=False)
            else:  # a native step as it is, a torchtitan one converted to native first
                with weights_in_native_format(source, self.run_dir, self.cfg.model) as native_step:
                    full = native_weights_for(native_step, self.cfg.model, self.model)
                for chunk in self.chunks:
                    load_full_weights(chunk, full)
        self.optimizer.reload_model_params()  # main (fp32) copies of bf16 weights follow the loaded weights
        log.info("initial weights loaded from %s", source)

    def _load_failure(self, key: str, path: Path, error: BaseException) -> CheckpointError:
        """One line: the first words of megatron-core's reason (a missing key lists every key of the checkpoint)."""
        cause = describe_failure(error)
        cause = cause if len(cause) <= 240 else cause[:240] + "..."
        return CheckpointError(f"{key}: {path} cannot be loaded into model {self.cfg.model.name} ({cause})")

    def _load_megatron(self, path: Path, key: str, with_optimizer: bool) -> None:
        from megatron.core import dist_checkpointing
        from torch.distributed.checkpoint.api import CheckpointException

        if with_optimizer:
            try:
                state = dist_checkpointing.load(self._sharded_state(for_loading=True), str(path))
            except (Exception, CheckpointException) as error:  # DCP's CheckpointException is a BaseException
                raise self._load_failure(key, path, error) from error
            self._load_model_state(state)
            self.optimizer.load_state_dict(state["optimizer"])
            trainer_state = torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=False)
            self.start_step = int(trainer_state["step"])
            torch.set_rng_state(trainer_state["torch_rng"])
            self.scheduler.load_state_dict(trainer_state["scheduler"])
            return
        try:
            state = dist_checkpointing.load(self._model_state(None), str(path))
        except (Exception, CheckpointException) as error:  # megatron-core raises many kinds: one line
            raise self._load_failure(key, path, error) from error
        self._load_model_state(state)
