"""backend=torch's LoRA targets by megatron-core's layer names (module.peft.target_modules), and what its LoRA does
not cover, one line each. No torch import: the adapter checks a config with it before launch."""
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

