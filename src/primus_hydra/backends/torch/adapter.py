"""backend=torch: translates the canonical config into the native trainer's arguments."""
from __future__ import annotations

from pathlib import Path

from primus_hydra.backends.base import BackendAdapter, BaseTrainer
from primus_hydra.config.validate import job_world_size, resolve_dp
from primus_hydra.config.values import plain


class TorchAdapter(BackendAdapter):
    name = "torch"
    import_name = "torch"
    distribution = "torch"
    install_hint = "Install the torch extra: pip install 'primus-hydra[torch]' (pin torch to your CUDA/ROCm/CPU build)."

    def validate(self) -> list[str]:
        p = self.cfg.module.parallel
        failures = []
        for key in ("tp", "pp", "cp", "ep"):
            if p[key] > 1:
                failures.append(f"module.parallel.{key}={p[key]}: backend=torch runs one process for now; {key}>1 needs the multi-process launch")
        for key in ("fsdp", "sequence_parallel"):
            if p[key]:
                failures.append(f"module.parallel.{key}=true: backend=torch runs one process for now; {key} needs the multi-process launch")
        if self.cfg.model.moe.capacity_factor is not None:
            failures.append(
                f"model.moe.capacity_factor={self.cfg.model.moe.capacity_factor}: backend=torch routes dropless only; set it to null"
            )
        world = job_world_size(self.cfg, self.dist)
        if world > 1:
            failures.append(f"world size {world}: backend=torch trains in a single process for now (launch.nnodes=1 launch.nproc_per_node=1)")
        return failures

    def convert_config(self) -> dict:
        cfg, m = self.cfg, self.cfg.module
        world = job_world_size(cfg, self.dist)
        dp = resolve_dp(cfg, world)
        module = plain(m)
        checkpoint = dict(module["checkpoint"])
        checkpoint["dir"] = str(Path(checkpoint["dir"]).expanduser().resolve()) if checkpoint["dir"] else str(self.run_dir / "checkpoints")
        return {
            "model": plain(cfg.model),
            "stage": module["stage"],
            "train_iters": m.train_iters,
            "exit_interval": m.exit_interval,
            "micro_batch_size": m.micro_batch_size,
            "global_batch_size": m.global_batch_size,
            "grad_accum_steps": m.global_batch_size // (m.micro_batch_size * dp),
            "seq_length": m.seq_length,
            "precision": module["precision"],
            "seed": m.seed,
            "optimizer": {
                "lr": m.lr, "min_lr": m.min_lr, "warmup_iters": m.warmup_iters,
                "lr_decay_style": module["lr_decay_style"], "lr_decay_iters": m.lr_decay_iters or m.train_iters,
                "weight_decay": m.weight_decay, "adam_beta1": m.adam_beta1, "adam_beta2": m.adam_beta2,
                "adam_eps": m.adam_eps, "clip_grad": m.clip_grad,
            },
            "data": module["data"],
            "checkpoint": checkpoint,
            "log": module["log"],
            "parallel": {**module["parallel"], "dp": dp},
            "device": cfg.platform.device,
            "peak_tflops_per_device": cfg.platform.peak_tflops_per_device,
            "compile": cfg.backend.compile,
            "deterministic": cfg.backend.deterministic,
            "num_threads": cfg.backend.num_threads,
            **plain(cfg.backend.extra_args),
        }

    def load_trainer_class(self, stage: str) -> type[BaseTrainer]:
        # pretrain and sft share the loop; sft starts from module.checkpoint.load
        from primus_hydra.backends.torch.trainer import TorchTrainer

        return TorchTrainer
