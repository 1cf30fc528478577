"""backend=torchtitan (0.2.x): torchtitan's own Trainer, inside this project's workers and loop.

The translated job config is written as TOML and read by the installed torchtitan's ConfigManager (job_file.py).
torchtitan's Trainer then builds everything as `torchrun -m torchtitan.train` would: its model from the flavor with
the preset's `model_args` over it, its parallelisms (FSDP, TP, DDP via ParallelDims), optimizers, lr schedulers, loss;
through a TrainSpec registered under this project's name, whose dataloader is the project's own batches (data.py).
The process group is the project's (torchtitan joins an existing one). Each step is torchtitan's `train_step`; this
project's loop (step_loop.py) runs the steps and feeds metrics.jsonl / TensorBoard / the progress bar from
torchtitan's own step metrics (loss, grad norm, tflops, MFU, memory); checkpoints are torchtitan's DCP states
(model, optimizers, lr schedulers, dataloader, train state) written with its checkpointer's dcp_save into the
project's atomic step folders. Weights start as backend=torch draws them for the seed (native_init.py).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from primus_hydra.backends.common.checkpoint_paths import TRAINER_STATE, read_meta
from primus_hydra.backends.common.data import IGNORED
from primus_hydra.backends.common.distributed import destroy_parallel_state, reshard_after_forward_only
from primus_hydra.backends.common.foreign_checkpoints import weights_in_native_format
from primus_hydra.backends.common.hf_folder import is_hf_folder
from primus_hydra.backends.common.metrics import MfuBaseline
from primus_hydra.backends.common.step_loop import StepLoopTrainer
from primus_hydra.backends.torchtitan.byte_tokenizer import TOKENIZER_DIR, write_byte_tokenizer
from primus_hydra.backends.torchtitan.convert import load_hf_weights, load_native_weights
from primus_hydra.backends.torchtitan.data import build_step_batches
from primus_hydra.backends.torchtitan.job_file import MODEL_ARGS, parse_job_file, write_job_file
from primus_hydra.backends.torchtitan.native_init import init_like_native
from primus_hydra.errors import PrimusError, TrainingDivergedError

log = logging.getLogger("primus_hydra.torchtitan")
JOB_FILE = Path(".primus") / "torchtitan_job.toml"
SPEC_PREFIX = "primus_hydra."


class StepMetrics:
    """torchtitan's metrics logger (its MetricsProcessor hands every step's metrics to it): keeps the last step's."""

    def __init__(self) -> None:
        self.latest: dict[str, Any] = {}

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.latest = dict(metrics)

    def close(self) -> None:
        pass


class TorchTitanTrainer(StepLoopTrainer):
    backend_args: dict
    group_of_one = True  # torchtitan's Trainer joins the project's process group, even alone

    def set_up_backend(self) -> None:
        os.environ.setdefault("LOCAL_RANK", str(self.dist.local_rank))  # torchtitan's Trainer names its device by it
        path = self.run_dir / JOB_FILE
        if self.dist.is_main:
            write_job_file(self.backend_args, path)
            if not (self.cfg.backend.tokenizer_path or self.cfg.module.data.get("tokenizer")):
                write_byte_tokenizer(self.run_dir / TOKENIZER_DIR)
        dist.barrier()
        self.job_config = parse_job_file(path)

    def build(self) -> None:
        import importlib.metadata

        from torchtitan.train import Trainer

        self.torchtitan_version = importlib.metadata.version("torchtitan")  # stamped into each checkpoint's meta
        job = self.job_config
        job.model.name = register_train_spec(self.cfg, self.backend_args, job, self.device)
        self.titan = Trainer(job)
        self.model_parts = self.titan.model_parts
        init_like_native(self.model_parts, self.cfg.model, self.cfg.module.seed)  # the same whatever the layout
        self.step_metrics = StepMetrics()
        self.titan.metrics_processor.logger = self.step_metrics
        # the MFU denominator: platform.peak_tflops_per_device, else torchtitan's (its table on GPUs, the measured
        # matmul peak on the CPU: patch torchtitan.cpu.peak_flops)
        platform_peak = self.cfg.platform.peak_tflops_per_device
        measured = not platform_peak and self.device.type == "cpu"  # the patch's measurement: measured again if beaten
        self.mfu_baseline = MfuBaseline(platform_peak or self.titan.metrics_processor.gpu_peak_flops / 1e12,
                                        measured_dtype=torch.float32 if measured else None, remeasure=self.dist.is_main)

    def restore(self, path: Optional[Path]) -> None:
        if path is not None:
            self._load(path)
        elif self.cfg.module.checkpoint.load:
            self._load_weights(self.cfg.module.checkpoint.load)
        # torchtitan's step counter and the batches go on from the step the run starts at
        self.titan.step = self.start_step
        self.titan.dataloader.next_step = self.start_step
        self.batches = self.titan.batch_generator(self.titan.dataloader)

    def cleanup(self, on_error: bool = False) -> None:
        self.close_metrics(on_error)
        titan = getattr(self, "titan", None)
        if titan is not None:
            titan.close()
        # Drop what holds the device mesh's groups (the Trainer, FSDP's modules, the batch generator) while the
        # groups are still registered, so that destroy_parallel_state frees them and not a dealloc at exit.
        self.titan = self.model_parts = self.batches = None
        if not on_error:
            destroy_parallel_state()

    # -- evaluation -------------------------------------------------------------------------------------
    def _eval_step(self, index: int) -> float:
        """Held-out batch `index` forward only, as torchtitan's train step runs it (its train context, AMP, the
        pipeline schedule's eval); the mean token loss over every rank's tokens (tp replicas count the same loss
        and tokens alike: the ratio is the data-parallel mean)."""
        titan = self.titan
        totals = torch.zeros(2, device=self.device, dtype=torch.float64)  # loss sum, tokens
        for part in self.model_parts:
            part.eval()
        try:
            with torch.no_grad():
                for input_dict, labels in titan.dataloader.held_out_micro_batches(index):
                    input_dict = {key: value.to(self.device) for key, value in input_dict.items()}
                    inputs, labels, extra_inputs, extra_kwargs = titan.post_dataloading_process(
                        input_dict, labels.to(self.device))
                    totals += torch.stack(self._held_out_loss_sum(inputs, labels, extra_inputs, extra_kwargs))
        finally:
            reshard_after_forward_only(self.model_parts)
            for part in self.model_parts:
                part.train()
        if dist.is_initialized():
            dist.all_reduce(totals)
        return float(totals[0] / totals[1])

    def _held_out_loss_sum(self, inputs, labels, extra_inputs, extra_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        titan = self.titan
        tokens = (labels != IGNORED).sum().to(self.device, torch.float64)  # source=sft: the learned targets only
        with titan.train_context():
            if titan.parallel_dims.pp_enabled:
                losses = [] if titan.pp_has_last_stage else None
                target = labels if titan.pp_has_last_stage else None
                if titan.pp_has_first_stage:
                    titan.pp_schedule.eval(inputs, **extra_inputs, **extra_kwargs, target=target, losses=losses)
                else:
                    titan.pp_schedule.eval(**extra_kwargs, target=target, losses=losses)
                if not losses:  # not the last stage: no loss here
                    return torch.zeros((), device=self.device, dtype=torch.float64), tokens * 0
                return torch.stack(losses).sum().to(self.device, torch.float64), tokens
            with titan.maybe_enable_amp:
                pred = self.model_parts[0](inputs, **extra_inputs, **extra_kwargs)
                loss_sum = titan.loss_fn(pred, labels)  # torchtitan's loss: a sum over the tokens
        if hasattr(loss_sum, "full_tensor"):  # tp's loss parallelism: a DTensor, the same on every tp rank
            loss_sum = loss_sum.full_tensor()
        return loss_sum.detach().to(torch.float64), tokens

    # -- one step ---------------------------------------------------------------------------------------
    def _train_step(self, step: int) -> dict[str, Any]:
        titan, module = self.titan, self.cfg.module
        titan.step = step + 1
        titan.gc_handler.run(titan.step)
        started = time.perf_counter()
        titan.train_step(self.batches)
        elapsed = time.perf_counter() - started
        metrics = self.step_metrics.latest
        loss = float(metrics["loss_metrics/global_avg_loss"])
        if not math.isfinite(loss):
            raise TrainingDivergedError(f"loss is {loss} at step {step + 1}; lower module.lr or check the data")
        batch_tokens = module.global_batch_size * module.seq_length
        tflops = float(metrics["tflops"])
        return {"step": step + 1, "loss": loss, "lr": float(metrics["lr"]), "grad_norm": float(metrics["grad_norm"]),
                "tokens_per_s": batch_tokens / elapsed, "tflops": tflops, "mfu": self.mfu_baseline.mfu(tflops, step + 1),
                "memory_gib": float(metrics["memory/max_reserved(GiB)"]), "step_time_s": elapsed}

    # -- checkpoints ------------------------------------------------------------------------------------
    def save_checkpoint(self, step: int) -> Path:
        from torchtitan.components.checkpoint import AsyncMode

        checkpointer = self.titan.checkpointer

        def write_shards(tmp: Path) -> dict:
            checkpointer.dcp_save(checkpointer._flattened_model_states_sd(), checkpoint_id=str(tmp),
                                  async_mode=AsyncMode.DISABLED)
            return {}

        meta = {"model": self.cfg.model.name, "backend": "torchtitan", "format": "torch.distributed.checkpoint",
                "torchtitan": self.torchtitan_version, "stage": str(self.cfg.module.stage),
                "world_size": self.layout.world_size}
        return self.save_step(step, {"step": step}, meta, model=None, optimizer=None, write_shards=write_shards)

    def _load_weights(self, spec: str) -> None:
        """module.checkpoint.load: weights only (optimizer and step start fresh), from a torchtitan step, or from a
        backend=torch or backend=megatron one (converted on load)."""
        from torchtitan.components.checkpoint import MODEL

        if is_hf_folder(Path(spec)):  # checked before launch (run_dir_checks.hf_load_failures)
            load_hf_weights(self.model_parts, Path(spec).expanduser(), self.cfg.model)
            log.info("initial weights loaded from the Hugging Face folder %s", spec)
            return
        source, _ = self.checkpoints.find(spec, "module.checkpoint.load")
        if read_meta(source)[0].get("backend") == "torchtitan":
            checkpointer = self.titan.checkpointer
            weights = checkpointer.states[MODEL].state_dict()
            checkpointer.dcp_load(weights, checkpoint_id=str(source), from_hf=False, from_quantized=False)
            checkpointer.states[MODEL].load_state_dict(weights)
        else:
            with weights_in_native_format(source, self.run_dir, self.cfg.model) as native_step:
                load_native_weights(self.model_parts, native_step, self.cfg.model)
        log.info("initial weights loaded from %s", source)

    def _load(self, path: Path) -> None:
        checkpointer = self.titan.checkpointer
        checkpointer.dcp_load(checkpointer._flattened_model_states_sd(), checkpoint_id=str(path),
                              from_hf=False, from_quantized=False)  # the states save_checkpoint wrote, all of them
        self.start_step = int(torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=False)["step"])


def register_train_spec(cfg: Any, backend_args: dict, job: Any, device: torch.device) -> str:
    """torchtitan's TrainSpec for job.model.name with the project's dataloader and the preset's model args over
    the flavor's, registered under this project's name (torchtitan's own extension point); returns that name."""
    from torchtitan.protocols import train_spec as specs

    spec = specs.get_train_spec(job.model.name)
    flavor = base_flavor(spec, job.model.flavor, cfg.backend.flavor)
    model_args = _with_overrides(spec.model_args[flavor], backend_args.get(MODEL_ARGS) or {})
    if device.type != "cuda" and getattr(model_args, "moe_args", None) is not None:
        # grouped GEMMs and their index kernels are CUDA's (triton): the experts run as a loop, as torchtitan's
        # deepseek_v3 itself decides below SM90 (its qwen3 does not)
        model_args = dataclasses.replace(model_args, moe_args=dataclasses.replace(model_args.moe_args,
                                                                                  use_grouped_mm=False))
    log.info("model %s: torchtitan %s flavor %s with the preset's model args", cfg.model.name, job.model.name, flavor)

    def dataloader(dp_world_size: int, dp_rank: int, tokenizer: Any, job_config: Any, **_: Any) -> Any:
        return build_step_batches(cfg, dp_rank, dp_world_size)

    name = f"{SPEC_PREFIX}{job.model.name}"
    specs._extra_train_specs.pop(name, None)  # a second trainer in this process replaces the first's
    specs.register_train_spec(name, dataclasses.replace(
        spec, model_args={job.model.flavor: model_args}, build_dataloader_fn=dataloader))
    return name


def base_flavor(spec: Any, flavor: str, chosen: Optional[str]) -> str:
    """The flavor whose model args the preset's override: the one named, else the first torchtitan registers (its
    debug model) when the preset has no flavor of its own name; a flavor the user names must exist."""
    if flavor in spec.model_args:
        return flavor
    if chosen:
        raise PrimusError(f"backend.flavor={chosen}: torchtitan has the flavors {', '.join(spec.model_args)}")
    return next(iter(spec.model_args))


def _with_overrides(flavor_args: Any, overrides: dict) -> Any:
    """A copy of the flavor's model args with the preset's values; nested dataclasses (rope scaling, MoE) field by
    field; a name the installed torchtitan's args do not have is one line."""
    fields = {field.name: field for field in dataclasses.fields(flavor_args)}
    values = {}
    for key, value in overrides.items():
        if key not in fields:
            raise PrimusError(f"backend=torchtitan: {type(flavor_args).__name__} of the installed torchtitan has no "
                              f"field {key} (model_args)")
        current = getattr(flavor_args, key)
        values[key] = _with_overrides(current, value) if dataclasses.is_dataclass(current) and isinstance(value, dict) else value
    return dataclasses.replace(flavor_args, **values)
