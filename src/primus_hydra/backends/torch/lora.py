"""module.peft.method=lora on backend=torch: low-rank adapters beside the target linear layers, the base weights
frozen (Hu et al. 2021, as Megatron-Bridge's LoRA does it: y = W x + (alpha / r) * B A dropout(x), A drawn, B zero,
so the adapted model starts as the base model).

The adapter is a submodule `lora` of the nn.Linear it adapts, added by a forward hook, so the base weights keep
their names (`layers.0.attention.wq.weight`) and a base checkpoint loads before the adapters exist; the adapters
add `layers.0.attention.wq.lora.a` / `.b`. Targets are named as megatron-core names its layers (Bridge's and
Primus's vocabulary): linear_qkv is wq, wk, wv; linear_proj is wo; linear_fc1 is w1 and w3 (SwiGLU's gate and up);
linear_fc2 is w2. Dense feed-forward layers only: routed experts (MoE) are no nn.Linear and get none.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from primus_hydra.backends.torch.layers import FeedForward
from primus_hydra.backends.torch.lora_targets import LORA_TARGETS
from primus_hydra.backends.torch.model import Attention

_OWNER_CLASSES = {"attention": Attention, "feed_forward": FeedForward}  # MLA and MoE layers get no adapter


class LowRankAdapter(nn.Module):
    def __init__(self, linear: nn.Linear, rank: int, alpha: float, dropout: float):
        super().__init__()
        device, dtype = linear.weight.device, linear.weight.dtype
        self.a = nn.Parameter(torch.empty(rank, linear.in_features, device=device, dtype=dtype))
        self.b = nn.Parameter(torch.zeros(linear.out_features, rank, device=device, dtype=dtype))
        nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))  # nn.Linear's own init, as LoRA's reference code
        self.scale = alpha / rank
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.dropout(x) @ self.a.t() @ self.b.t()) * self.scale


def _add_adapter_output(linear: nn.Linear, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
    return output + linear.lora(inputs[0])


def add_lora(model: nn.Module, peft: Any, seed: int) -> tuple[int, int]:
    """Adapters on every target layer of `model`, drawn from `seed` (the same on every rank); every other parameter
    frozen. Returns (trained, total) parameter counts."""
    for param in model.parameters():
        param.requires_grad_(False)
    generator_state = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        for name in peft.target_modules:
            owner_name, attributes = LORA_TARGETS[str(name)]
            for block in model.layers.values():
                module = getattr(block, owner_name)
                if isinstance(module, _OWNER_CLASSES[owner_name]):
                    for attribute in attributes:
                        linear = getattr(module, attribute)
                        linear.lora = LowRankAdapter(linear, int(peft.rank), float(peft.alpha), float(peft.dropout))
                        linear.register_forward_hook(_add_adapter_output)
    finally:
        torch.set_rng_state(generator_state)
    trained = sum(param.numel() for param in model.parameters() if param.requires_grad)
    return trained, sum(param.numel() for param in model.parameters())
