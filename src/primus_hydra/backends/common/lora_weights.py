"""A LoRA step of backend=torch (module.peft.method=lora): what its meta.json records, and its adapters folded into
the weights they adapt (task=export writes the adapted model). Tensor arithmetic only: no torch import here."""
from __future__ import annotations

from typing import Any

ADAPTER_A, ADAPTER_B = ".lora.a", ".lora.b"


def peft_meta(peft: Any) -> dict:
    """What a LoRA run's step records in its meta.json (the merge needs alpha / rank)."""
    return {"method": str(peft.method), "rank": int(peft.rank), "alpha": float(peft.alpha)}


def merged_adapters(tensors: dict, peft: dict) -> dict:
    """A LoRA step's tensors under native names with each adapter folded into the weight it adapts,
    W + alpha / rank * B A (what the adapted model computes), and no adapter left."""
    scale = float(peft["alpha"]) / int(peft["rank"])
    merged = {key: tensor for key, tensor in tensors.items() if not key.endswith((ADAPTER_A, ADAPTER_B))}
    for key, down in tensors.items():
        if key.endswith(ADAPTER_A):
            prefix = key[: -len(ADAPTER_A)]
            weight = merged[prefix + ".weight"]
            up = tensors[prefix + ADAPTER_B]
            merged[prefix + ".weight"] = (weight.float() + scale * (up.float() @ down.float())).to(weight.dtype)
    return merged
