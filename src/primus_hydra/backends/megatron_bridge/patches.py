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
