"""AdamW with Megatron-style weight-decay groups, and the learning-rate schedule (warmup, then cosine/linear/constant)."""
from __future__ import annotations

import math

import torch
from torch import nn


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float) -> torch.optim.AdamW:
    """No weight decay on norms, biases and 1-D parameters (as Megatron does; torchtitan 0.2 decays every parameter)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # foreach=False keeps CPU updates bitwise reproducible across runs with different thread timing
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=False)


def learning_rate(step: int, *, lr: float, min_lr: float, warmup_iters: int, decay_iters: int, style: str) -> float:
    """The lr for 0-based `step`: linear warmup to lr, then decay to min_lr by decay_iters, then min_lr."""
    if warmup_iters and step < warmup_iters:
        return lr * (step + 1) / warmup_iters
    if style == "constant":
        return lr
    if step >= decay_iters:
        return min_lr
    progress = (step - warmup_iters) / max(decay_iters - warmup_iters, 1)
    if style == "linear":
        coefficient = 1.0 - progress
    else:  # cosine
        coefficient = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr + coefficient * (lr - min_lr)
