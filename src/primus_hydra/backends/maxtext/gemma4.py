"""Gemma 4 on MaxText: the canonical model's Gemma 4 keys as the keys of MaxText's gemma4 decoder block
(src/maxtext/models/gemma4.py, configs/models/gemma4-*.yml), and what that block fixes that the canonical model
leaves open (one line each, before anything starts)."""
from __future__ import annotations

from typing import Any

from primus_hydra.backends.architecture_support import gemma4_features
from primus_hydra.config.schema_model import GEMMA4_FAMILY

WINDOW_LAYERS_PER_GLOBAL = 5  # MaxText's GEMMA4_ATTENTION_PATTERN: five sliding-window layers, then a global one


def gemma4_block_failures(model: Any) -> list[str]:
    """What MaxText's gemma4 block cannot build of `model` (none for a model without Gemma 4's keys)."""
    features = gemma4_features(model)
    if not features:
        return []
    if str(model.family) != GEMMA4_FAMILY:
        keys = ", ".join(f"model.{key}={value}" for key, value in features)
        return [f"{keys}: MaxText builds Gemma 4's layers in its gemma4 decoder block only; set model.family=gemma4 "
                f"(model={model.name})"]
    failures = []
    every = WINDOW_LAYERS_PER_GLOBAL + 1
    if model.sliding_window is None or model.full_attention_every != every:
        failures.append(f"model.sliding_window={model.sliding_window}, model.full_attention_every="
                        f"{model.full_attention_every}: MaxText's gemma4 block has {WINDOW_LAYERS_PER_GLOBAL} "
                        f"sliding-window layers to each global one (a window and full_attention_every={every})")
    if not model.qk_norm:
        failures.append("model.qk_norm=false: MaxText's gemma4 block normalises q and k in every layer (qk_norm=true)")
    moe = model.moe
    shared_width = moe.shared_expert_ffn_hidden_size
    if moe.num_experts and (moe.shared_experts != 1 or shared_width not in (None, model.ffn_hidden_size)):
        failures.append(f"model.moe.shared_experts={moe.shared_experts}, model.moe.shared_expert_ffn_hidden_size="
                        f"{moe.shared_expert_ffn_hidden_size}: MaxText's gemma4 block has one shared expert, the dense "
                        f"MLP of model.ffn_hidden_size={model.ffn_hidden_size}")
    return failures


def gemma4_config(model: Any) -> dict:
    """MaxText's gemma4 keys for `model` (family gemma4): the window layers' head width and RoPE are the model's own,
    the global layers' model.global_attention's."""
    wide = model.global_attention
    global_theta = wide.rope_theta or model.rope_theta
    return {
        "decoder_block": "gemma4",
        "sliding_window_size": model.sliding_window,
        "global_head_dim": wide.head_dim or 0,  # 0: the window layers' head_dim
        "global_num_kv_heads": wide.num_kv_heads or 0,
        "share_kv_projections": wide.shared_kv,
        "local_rope_max_timescale": int(model.rope_theta),
        "global_rope_max_timescale": int(global_theta),
        "rope_max_timescale": int(global_theta),
        "local_rope_proportion": 1.0,
        "global_rope_proportion": wide.rope_fraction,
        "use_post_attn_norm": True,
        "use_post_ffw_norm": True,
        "v_norm_with_scale": False,
    }
