"""backend=torch's LoRA targets by megatron-core's layer names (module.peft.target_modules), what its LoRA does not
cover (one line each), and the adapters of a LoRA step merged into its weights. No torch import: the adapter
checks a config with it before launch."""
from __future__ import annotations

from typing import Any

# megatron-core's layer name -> (the block's attribute holding it, that module's nn.Linear attributes)
LORA_TARGETS = {
    "linear_qkv": ("attention", ("wq", "wk", "wv")),
    "linear_proj": ("attention", ("wo",)),
    "linear_fc1": ("feed_forward", ("w1", "w3")),  # SwiGLU's gate and up
    "linear_fc2": ("feed_forward", ("w2",)),
}


def lora_failures(cfg: Any) -> list[str]:
    peft, p, model = cfg.module.peft, cfg.module.parallel, cfg.model
    if not peft.method:
        return []
    failures = [f"module.peft.target_modules: {name!r} is no LoRA target; allowed: {', '.join(LORA_TARGETS)}"
                for name in peft.target_modules if name not in LORA_TARGETS]
    if p.tp > 1 or p.pp > 1 or p.fsdp:
        failures.append(f"module.peft.method={peft.method}: backend=torch adapts replicated models only (data "
                        f"parallel); got tp={p.tp}, pp={p.pp}, fsdp={str(p.fsdp).lower()}")
    if model.mla.enabled:
        failures.append(f"module.peft.method={peft.method}: backend=torch has no LoRA targets in multi-latent "
                        f"attention (model {model.name}); use backend=megatron_bridge")
    if peft.rank < 1:
        failures.append(f"module.peft.rank={peft.rank}: must be >= 1")
    return failures


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
