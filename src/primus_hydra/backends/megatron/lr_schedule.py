"""megatron-core's OptimizerParamScheduler (its decay styles, weight-decay schedule and state dict), warmed up the
way every backend of this project warms up: 0-based step s of a W-step warmup trains at lr * (s + 1) / W, so the
first step learns (Megatron's own warmup gives step 0 lr 0) and a warmup longer than the decay keeps rising
instead of tripping Megatron's `warmup < decay` assertion. Both backends then follow the same lr per step.
Megatron-Bridge's scheduler counts samples, not steps (it steps by the global batch): `scheduler_steps_per_step`.
"""
from __future__ import annotations

from typing import Any


def warming_up_from_first_step(scheduler_class: type, warmup_iters: int, scheduler_steps_per_step: int = 1) -> type:
    """`scheduler_class` (OptimizerParamScheduler or a subclass) with the project's warmup over `warmup_iters`
    training steps; its own schedule after them."""
    warmup = warmup_iters * scheduler_steps_per_step

    class WarmupFromFirstStep(scheduler_class):
        def get_lr(self, param_group: dict) -> float:
            if self.num_steps < warmup:
                return param_group.get("max_lr", self.max_lr) * (self.num_steps + scheduler_steps_per_step) / warmup
            return super().get_lr(param_group)

    return WarmupFromFirstStep


def build_lr_scheduler(optimizer: Any, args: dict) -> Any:
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    warmup, decay = int(args["lr_warmup_iters"]), int(args["lr_decay_iters"])
    scheduler_class = warming_up_from_first_step(OptimizerParamScheduler, warmup)
    return scheduler_class(
        optimizer, init_lr=0.0, max_lr=args["lr"], min_lr=args["min_lr"], lr_warmup_steps=min(warmup, decay - 1),
        lr_decay_steps=decay, lr_decay_style=args["lr_decay_style"], start_wd=args["weight_decay"],
        end_wd=args["weight_decay"], wd_incr_steps=args["train_iters"], wd_incr_style="constant")
