"""backend=torch: the layouts the native trainer implements, what a run would find on disk, and the typed
arguments it reads (args.py)."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from primus_hydra.backends.base import BackendAdapter, BaseTrainer
from primus_hydra.backends.torch.args import TorchTrainingArgs
from primus_hydra.backends.torch.checkpoint_paths import CheckpointFolder
from primus_hydra.config.paths import writable_dir_failure
from primus_hydra.errors import CheckpointError

METRICS_FILE = "metrics.jsonl"


class TorchAdapter(BackendAdapter):
    name = "torch"
    import_name = "torch"
    distribution = "torch"
    required_modules = ("torch", "numpy")  # the rest of the extra (tqdm, tensorboard, matplotlib) is optional
    install_hint = "Install the torch extra: pip install 'primus-hydra[torch]' (pin torch to your CUDA/ROCm/CPU build)."

    def validate(self) -> list[str]:
        failures = self._layout_failures()
        if self.cfg.backend.extra_args:
            failures.append(f"backend.extra_args={OmegaConf.to_container(self.cfg.backend.extra_args)}: backend=torch "
                            "has no native arguments to pass them to; its knobs are module.*, model.* and backend.*")
        if self.run_dir is not None:
            failures += self._run_dir_failures()
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
        configured = self.cfg.module.checkpoint.dir
        return Path(configured).expanduser().resolve() if configured else self.run_dir / "checkpoints"

    def training_failures(self) -> list[str]:
        """Besides the library: a configured checkpoint dir that a save could not write into is found now, before
        training, not at the first save (a file, a path under a file such as /dev/null, a read-only folder); and a
        token file the run could not read (its size, length, ids and width: token_file.py)."""
        failures = super().training_failures() + self._data_failures()
        ckpt, module = self.cfg.module.checkpoint, self.cfg.module
        saves = ckpt.interval or ckpt.save_final or ckpt.on_signal or module.exit_interval
        if ckpt.dir and saves:
            failure = writable_dir_failure("module.checkpoint.dir", ckpt.dir, "checkpoints need a folder this run can "
                                           "write or create; choose another module.checkpoint.dir (null: <run_dir>/checkpoints)")
            failures += [failure] if failure else []
        return failures

    def _data_failures(self) -> list[str]:
        data, module = self.cfg.module.data, self.cfg.module
        if data.source == "indexed" and data.path:
            from primus_hydra.backends.torch.indexed_file import indexed_data_failures

            return indexed_data_failures(data.path, self.cfg.model.vocab_size, module.seq_length, blends=False)
        if data.source != "tokens" or not data.path or not Path(str(data.path)).expanduser().exists():
            return []  # a missing path is the orchestrator's line (orchestrator/prepare.py)
        from primus_hydra.backends.torch.token_file import token_file_failure  # numpy: only for a token file

        failure = token_file_failure(data.path, str(data.token_dtype), self.cfg.model.vocab_size, module.seq_length)
        return [failure] if failure else []

    def _run_dir_failures(self) -> list[str]:
        """What the run would find on disk and refuse, found before it starts: a checkpoint to resume or load that is
        not one, checkpoints or metrics of an earlier run that a fresh run would mix with its own."""
        ckpt = self.cfg.module.checkpoint
        folder = CheckpointFolder(self.checkpoint_dir())
        failures = []
        for key, spec in (("module.checkpoint.resume", ckpt.resume), ("module.checkpoint.load", ckpt.load)):
            if spec in (None, "auto") or not Path(spec).expanduser().exists():
                continue  # a path that does not exist: the orchestrator reports it (orchestrator/prepare.py)
            try:
                folder.resolve(spec, key)
            except CheckpointError as error:
                failures.append(str(error))
        overwrite = folder.unresumed_failure(ckpt.resume)
        if overwrite:
            failures.append(overwrite)
        if ckpt.resume is None and (self.run_dir / METRICS_FILE).exists():
            failures.append(
                f"{self.run_dir / METRICS_FILE} already holds an earlier run's metrics; choose a new hydra.run.dir, "
                f"or continue that run with module.checkpoint.resume=auto"
            )
        return failures

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

    def load_trainer_class(self, stage: str) -> type[BaseTrainer]:
        # pretrain and sft share the loop; sft starts from module.checkpoint.load
        from primus_hydra.backends.torch.trainer import TorchTrainer

        return TorchTrainer
