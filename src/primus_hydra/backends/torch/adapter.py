"""backend=torch: the layouts the native trainer implements, what a run would find on disk, and the typed
arguments it reads (args.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from primus_hydra.backends.base import BackendAdapter, BaseTrainer
from primus_hydra.backends.common.data_sources import data_source_failures, data_source_warnings
from primus_hydra.backends.common.run_dir_checks import checkpoint_load_warnings, existing_run_failures
from primus_hydra.backends.torch.args import TorchTrainingArgs
from primus_hydra.backends.torch.lora_targets import lora_failures
from primus_hydra.backends.traits import BackendTraits
from primus_hydra.config.paths import checkpoint_dir_of, writable_dir_failure


class TorchAdapter(BackendAdapter):
    name = "torch"
    import_name = "torch"
    distribution = "torch"
    required_modules = ("torch", "numpy")  # the rest of the extra (tqdm, tensorboard, matplotlib) is optional
    install_hint = "Install the torch extra: pip install 'primus-hydra[torch]' (pin torch to your CUDA/ROCm/CPU build)."
    traits = BackendTraits(
        context_parallel=False, expert_parallel=False, pipeline_alone=True, pipeline_schedules=("1f1b", "gpipe"),
        dp_shards_beside_tp=True, bf16_parameter_gathers=False, bf16_by_autocast=True, native_activations=True,
        frees_gradients_between_steps=True,
        loader_processes=False,  # each step's batch is built from (seed, step) in the training process
        lora=True,  # lora.py
        interleaved_moe=True,  # model.py, moe.py
    )

    def validate(self) -> list[str]:
        failures = self._layout_failures() + self.peft_failures() + lora_failures(self.cfg)
        if self.cfg.backend.extra_args:
            failures.append(f"backend.extra_args={OmegaConf.to_container(self.cfg.backend.extra_args)}: backend=torch "
                            "has no native arguments to pass them to; its knobs are module.*, model.* and backend.*")
        if self.run_dir is not None:  # what the run would find on disk and refuse (run_dir_checks.py)
            failures += existing_run_failures(self.cfg, self.run_dir, self.checkpoint_dir(), self.name)
        return failures

    def _layout_failures(self) -> list[str]:
        """The layouts the native backend implements: DDP or FSDP2 over dp, DTensor TP (alone or with FSDP2 over
        dp), and PP alone (GPipe/1F1B) for dense models."""
        p, model, layout = self.cfg.module.parallel, self.cfg.model, self.layout
        failures = []
        for key in ("cp", "ep"):
            if p[key] > 1:
                failures.append(f"module.parallel.{key}={p[key]}: backend=torch does not implement {key} (use tp, pp, dp or fsdp)")
        if p.sequence_parallel:
            failures.append("module.parallel.sequence_parallel=true: backend=torch does not implement sequence parallelism; set it to false")
        if model.moe.capacity_factor is not None:
            failures.append(f"model.moe.capacity_factor={model.moe.capacity_factor}: backend=torch routes dropless only; set it to null")
        dp = layout.dp
        if p.fsdp and dp == 1:
            failures.append(f"module.parallel.fsdp=true needs dp > 1 to shard over (world {layout.world_size} = tp {p.tp} x pp {p.pp}); set fsdp=false or add processes")
        special = [name for name, used in (("MoE", model.moe.num_experts > 0), ("MLA", model.mla.enabled), ("tied embeddings", model.tie_embeddings)) if used]
        if p.tp > 1 and special:
            failures.append(f"module.parallel.tp={p.tp}: backend=torch shards dense GQA models only ({model.name} uses {', '.join(special)})")
        if p.pp > 1:
            if special:
                failures.append(f"module.parallel.pp={p.pp}: backend=torch pipelines dense GQA models only ({model.name} uses {', '.join(special)})")
            if p.tp > 1 or dp > 1 or p.fsdp:
                failures.append(
                    f"module.parallel.pp={p.pp} with tp={p.tp}, dp={dp}, fsdp={str(p.fsdp).lower()}: backend=torch runs pp alone (tp=1, dp=1, fsdp=false)"
                )
            if p.pp_schedule == "1f1b" and layout.grad_accum < p.pp:
                failures.append(
                    f"module.parallel.pp={p.pp} with 1f1b needs at least {p.pp} micro-batches per step, got "
                    f"global_batch_size/micro_batch_size = {layout.grad_accum}; raise global_batch_size or use pp_schedule=gpipe"
                )
        return failures

    def checkpoint_dir(self) -> Path:
        return Path(checkpoint_dir_of(self.cfg, self.run_dir))

    def training_failures(self) -> list[str]:
        """Besides the library: a configured checkpoint dir that a save could not write into is found now, before
        training, not at the first save (a file, a path under a file such as /dev/null, a read-only folder); and data
        the run could not read (data_sources.py)."""
        failures = super().training_failures() + data_source_failures(self.cfg, blends=False)
        ckpt, module = self.cfg.module.checkpoint, self.cfg.module
        saves = ckpt.interval or ckpt.save_final or ckpt.on_signal or module.exit_interval
        if ckpt.dir and saves:
            failure = writable_dir_failure("module.checkpoint.dir", ckpt.dir, "checkpoints need a folder this run can "
                                           "write or create; choose another module.checkpoint.dir (null: <run_dir>/checkpoints)")
            failures += [failure] if failure else []
        return failures

    def warnings(self) -> list[str]:
        return checkpoint_load_warnings(self.cfg) + data_source_warnings(self.cfg)

    def convert_config(self) -> TorchTrainingArgs:
        cfg = self.cfg
        module = OmegaConf.to_object(cfg.module)
        module.checkpoint.dir = str(self.checkpoint_dir())
        return TorchTrainingArgs(
            model=OmegaConf.to_object(cfg.model), module=module, layout=self.layout, device=cfg.platform.device,
            peak_tflops_per_device=cfg.platform.peak_tflops_per_device, timeout_s=cfg.launch.timeout_s,
            deterministic=cfg.backend.deterministic, num_threads=cfg.backend.num_threads,
            measure_memory=cfg.backend.measure_memory,
        )

    def typed_arguments(self, arguments: Any) -> TorchTrainingArgs:
        return arguments if isinstance(arguments, TorchTrainingArgs) else TorchTrainingArgs.from_plain(arguments)

    def load_trainer_class(self, stage: str) -> type[BaseTrainer]:
        # pretrain and sft share the loop; sft starts from module.checkpoint.load
        from primus_hydra.backends.torch.trainer import TorchTrainer

        return TorchTrainer
