"""The layer pattern (Megatron's hybrid letters: M mixer, * attention, - MLP) a Primus hybrid experiment builds
when it gives ratios instead of hybrid_override_pattern, and the mixer its `spec` puts in the M layers.

Two allocators exist: Primus's HybridStack (its hybrid_mamba_mla_layer_specs, the zebra_llama presets) pairs every
mixer or attention layer with an MLP layer and spreads the attention blocks evenly from the first block on;
megatron-core's MambaStack (pure Mamba, mamba_layer_specs) spreads attention layers between Mamba sections, then
MLP layers over what is left. Both are rewritten here in plain Python (the import never imports torch)."""
from __future__ import annotations

from typing import Any, Optional

# Primus's hybrid spec names -> model.hybrid.mixer (the module hybrid_mamba_mla_layer_specs)
PRIMUS_SPEC_MIXERS = {"hybrid_stack_spec": "mamba2", "mamba_hybrid_stack_spec_no_te": "mamba2",
                      "gdn_hybrid_stack_spec": "gated_delta_net", "gdn_hybrid_stack_spec_no_te": "gated_delta_net",
                      "kda_hybrid_stack_spec": "kimi_delta_attention",
                      "kda_hybrid_stack_spec_no_te": "kimi_delta_attention"}
PRIMUS_HYBRID_MODULE = "hybrid_mamba_mla_layer_specs"


def spec_mixer(spec: Any) -> Optional[str]:
    """The mixer a `spec: [module, name]` builds; None: megatron-core's Mamba stack (or no spec)."""
    if not spec or len(spec) < 2:
        return None
    return PRIMUS_SPEC_MIXERS.get(str(spec[-1])) if PRIMUS_HYBRID_MODULE in str(spec[0]) else None


def uses_primus_hybrid_stack(args: dict) -> bool:
    """Primus's HybridStack: a hybrid model whose spec is Primus's hybrid module (or a preset without a spec, as
    every is_hybrid_model preset of Primus is run with one)."""
    spec = args.get("spec")
    return bool(args.get("is_hybrid_model")) and (not spec or PRIMUS_HYBRID_MODULE in str(spec[0]))


def primus_hybrid_pattern(num_layers: int, attention_ratio: float) -> str:
    """Primus's HybridStack.allocate_layers: num_layers // 2 blocks of (mixer or attention) + MLP."""
    blocks = num_layers // 2
    attention = int(blocks * attention_ratio)
    mixers = blocks - attention
    if attention == 0:
        return "M-" * blocks
    if attention_ratio <= 0.5:
        per_attention = mixers // attention
        return ("*-" + "M-" * per_attention) * attention + "M-" * (mixers % attention)
    return "*-" * (attention - mixers) + "*-M-" * mixers


def megatron_core_pattern(num_layers: int, attention_ratio: float, mlp_ratio: float) -> str:
    """megatron-core's allocate_layers without an override: attention layers evenly between Mamba sections,
    then MLP layers evenly over the remaining Mamba layers, right-justified."""
    attention = round(num_layers * attention_ratio)
    mamba = num_layers - attention
    section = mamba / (attention + 1)
    layers, budget = ["M"] * num_layers, section
    for index in range(num_layers):
        if budget < 0.5:
            layers[index], budget = "*", budget + section
        else:
            budget -= 1
    mlp = round(num_layers * mlp_ratio)
    if mlp > 0:
        step = (mamba - mlp) / mlp
        budget = step
        for index in range(num_layers):
            if layers[index] == "M":
                if budget < 0.5:
                    layers[index], budget = "-", budget + step
                else:
                    budget -= 1
    return "".join(layers)


def hybrid_pattern(args: dict) -> Optional[str]:
    """The layer pattern of a Primus Megatron model (None: a GPT model)."""
    if not (args.get("is_hybrid_model") or args.get("model_type") == "mamba"):
        return None
    if args.get("hybrid_override_pattern"):
        return str(args["hybrid_override_pattern"])
    layers, attention = int(args.get("num_layers") or 0), float(args.get("hybrid_attention_ratio") or 0.0)
    if uses_primus_hybrid_stack(args):
        return primus_hybrid_pattern(layers, attention)
    return megatron_core_pattern(layers, attention, float(args.get("hybrid_mlp_ratio") or 0.0))
