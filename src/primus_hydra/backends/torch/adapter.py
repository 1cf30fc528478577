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
        """The layouts the native backend implements: DDP or FSDP2 over dp, DTensor TP (alone or with FSDP2
        over dp), and PP alone (GPipe/1F1B) for dense models."""
        cfg, p, model = self.cfg, self.cfg.module.parallel, self.cfg.model
        failures = []
        for key in ("cp", "ep"):
            if p[key] > 1:
                failures.append(f"module.parallel.{key}={p[key]}: backend=torch does not implement {key} (use tp, pp, dp or fsdp)")
        if p.sequence_parallel:
            failures.append("module.parallel.sequence_parallel=true: backend=torch does not implement sequence parallelism; set it to false")
        if model.moe.capacity_factor is not None:
            failures.append(f"model.moe.capacity_factor={model.moe.capacity_factor}: backend=torch routes dropless only; set it to null")
        if p.pp_schedule not in ("1f1b", "gpipe"):
            failures.append(f"module.parallel.pp_schedule={p.pp_schedule}: allowed: 1f1b, gpipe")
        world = job_world_size(cfg, self.dist)
        if world % (p.tp * p.pp * p.cp):
            return failures  # the global world-layout rule already reported it
        dp = resolve_dp(cfg, world)
        if p.fsdp and dp == 1:
            failures.append(f"module.parallel.fsdp=true needs dp > 1 to shard over (world {world} = tp {p.tp} x pp {p.pp}); set fsdp=false or add processes")
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
            accum = cfg.module.global_batch_size // (cfg.module.micro_batch_size * dp)
            if p.pp_schedule == "1f1b" and accum < p.pp:
                failures.append(
                    f"module.parallel.pp={p.pp} with 1f1b needs at least {p.pp} micro-batches per step, got "
                    f"global_batch_size/micro_batch_size = {accum}; raise global_batch_size or use pp_schedule=gpipe"
                )
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
            "timeout_s": cfg.launch.timeout_s,
            "device": cfg.platform.device,
            "peak_tflops_per_device": cfg.platform.peak_tflops_per_device,
            "compile": cfg.module.compile,
            "deterministic": cfg.backend.deterministic,
            "num_threads": cfg.backend.num_threads,
            **plain(cfg.backend.extra_args),
        }

    def load_trainer_class(self, stage: str) -> type[BaseTrainer]:
        # pretrain and sft share the loop; sft starts from module.checkpoint.load
        from primus_hydra.backends.torch.trainer import TorchTrainer

        return TorchTrainer
