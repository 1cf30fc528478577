"""Rules for a hybrid (state-space) model's keys (model.hybrid.*): the layer pattern and the mixer sizes.

One line per bad value, naming the key, its value and what is allowed. Pure: nothing imported but the config.
"""
from __future__ import annotations

from omegaconf import DictConfig

from primus_hydra.config.hybrid_math import mamba_heads

# Megatron's hybrid layer letters (megatron/core/ssm/mamba_hybrid_layer_allocation.py, Symbols)
PATTERN_LETTERS = {"M": "mixer", "*": "attention", "-": "MLP", "E": "MoE"}


def check_hybrid_model(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    model, tp = cfg.model, cfg.module.parallel.tp
    if model.hybrid.layer_pattern is None:
        return
    pattern = str(model.hybrid.layer_pattern)
    allowed = ", ".join(f"{letter} {kind}" for letter, kind in PATTERN_LETTERS.items())
    unknown = sorted({letter for letter in pattern if letter not in PATTERN_LETTERS})
    if not pattern or unknown:
        failures.append(f"model.hybrid.layer_pattern={pattern!r}: one letter per layer, each one of {allowed}"
                        + (f" (not {', '.join(map(repr, unknown))})" if unknown else ""))
        return
    if len(pattern) != model.num_layers:
        failures.append(f"model.hybrid.layer_pattern={pattern!r}: has {len(pattern)} letters, model.num_layers="
                        f"{model.num_layers} needs one per layer")
    if "E" in pattern and not model.moe.num_experts:
        failures.append(f"model.hybrid.layer_pattern={pattern!r}: E layers are MoE layers, but model.moe.num_experts=0")
    if "M" in pattern:
        _mixer_sizes(model, tp, failures)


def _mixer_sizes(model, tp: int, failures: list[str]) -> None:
    hybrid = model.hybrid
    if str(hybrid.mixer) == "mamba2":
        names = ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads")
    else:
        names = ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                 "linear_num_value_heads")
    small = [name for name in names if hybrid[name] is not None and hybrid[name] < 1]
    for name in small:
        failures.append(f"model.hybrid.{name}={hybrid[name]}: must be >= 1")
    if small:
        return
    if str(hybrid.mixer) == "mamba2":
        if hybrid.mamba_num_heads is None and 2 * model.hidden_size % hybrid.mamba_head_dim:
            failures.append(f"model.hybrid.mamba_head_dim={hybrid.mamba_head_dim}: must divide 2 x model.hidden_size="
                            f"{2 * model.hidden_size} (or set model.hybrid.mamba_num_heads)")
            return
        heads, groups = mamba_heads(model), hybrid.mamba_num_groups
        if heads % groups:
            failures.append(f"model.hybrid.mamba_num_groups={groups}: must divide the {heads} Mamba heads")
        if heads % tp or groups % tp:
            failures.append(f"module.parallel.tp={tp}: must divide the {heads} Mamba heads and model.hybrid."
                            f"mamba_num_groups={groups} (each TP rank holds whole heads and groups)")
        return
    keys, values = hybrid.linear_num_key_heads, hybrid.linear_num_value_heads
    if values % keys:
        failures.append(f"model.hybrid.linear_num_value_heads={values}: must be a multiple of model.hybrid."
                        f"linear_num_key_heads={keys} (each key head serves whole value heads)")
    if values % tp or keys % tp:
        failures.append(f"module.parallel.tp={tp}: must divide model.hybrid.linear_num_key_heads={keys} and "
                        f"linear_num_value_heads={values}")
