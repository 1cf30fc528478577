"""Built-in Megatron-Bridge patches, loaded when backend=megatron_bridge: the CPU set (megatron_bridge.cpu.*) and the
project's warmup on Bridge's scheduler."""
from __future__ import annotations

from primus_hydra.backends.megatron_bridge import cpu_patches  # noqa: F401 - registers megatron_bridge.cpu.*
from primus_hydra.backends.megatron_bridge.cpu_patches import CPU_PATCH_VERSIONS
from primus_hydra.patches.registry import PatchContext, register_patch


@register_patch("megatron_bridge.schedule.warmup_from_first_step", backend="megatron_bridge", phase="setup",
                backend_versions=CPU_PATCH_VERSIONS)
def warmup_from_first_step(ctx: PatchContext) -> None:
    """Bridge's scheduler warms up as Megatron's (step 0 at lr 0): the project's warmup instead, step s of W at
    lr * (s + 1) / W, as every other backend of this project, so the backends follow the same lr per step."""
    from megatron.bridge.training import optim
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    from primus_hydra.backends.megatron.lr_schedule import warming_up_from_first_step

    module = ctx.cfg.module
    optim.OptimizerParamScheduler = warming_up_from_first_step(OptimizerParamScheduler, int(module.warmup_iters),
                                                               int(module.global_batch_size))


@register_patch("megatron_bridge.checkpoint.in_process_save", backend="megatron_bridge", phase="setup",
                backend_versions=CPU_PATCH_VERSIONS)
def in_process_save(ctx: PatchContext) -> None:
    """megatron-core's torch_dist save hands the write to forked writers reporting through a multiprocessing Manager
    it starts with spawn and never stops: the Manager outlives the run (holding its stdout) and a writer that dies
    leaves the trainer waiting forever. Bridge's synchronous saves write the same torch_dist files in this process
    instead (megatron/checkpoint_strategy.py, what backend=megatron uses)."""
    from megatron.bridge.training import checkpointing

    from primus_hydra.backends.megatron.checkpoint_strategy import in_process_save_strategy

    library_default = checkpointing.get_default_save_sharded_strategy

    def save_strategy(backend: str = "torch_dist", *args, **kwargs):
        if backend == "torch_dist" and not ctx.backend_args["checkpoint"].get("async_save"):
            return in_process_save_strategy()
        return library_default(backend, *args, **kwargs)

    checkpointing.get_default_save_sharded_strategy = save_strategy


@register_patch("megatron_bridge.moe.router_gemm_without_te", backend="megatron_bridge", phase="setup",
                backend_versions=CPU_PATCH_VERSIONS, condition=lambda ctx: bool(ctx.cfg.model.moe.num_experts))
def router_gemm_without_te(ctx: PatchContext) -> None:
    """Bridge's MoE layers are megatron-core's: the same fix as megatron.moe.router_gemm_without_te (megatron-core
    0.16's router names te_general_gemm only where Transformer Engine imports)."""
    from primus_hydra.backends.megatron.patches import router_gemm_without_te as megatron_cores

    megatron_cores(ctx)
