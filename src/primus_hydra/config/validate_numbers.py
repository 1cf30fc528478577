"""The numbers of a composed config in their ranges: every float finite, sizes positive, rates non-negative.

Run before the cross-field rules (config/validate.py): a NaN compares false with everything, so `lr=nan` would
pass `lr > 0` and only show up as a NaN loss blamed on the learning rate; `clip_grad=nan` would silently turn
clipping off; a negative exit_interval would stop after the first step. One line per bad value.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

SEED_LIMIT = 2 ** 63  # torch.manual_seed takes a 64-bit seed; numpy and Python's random want it non-negative

POSITIVE = (  # > 0 (floats) or >= 1 (integers); `null` stays allowed where the schema allows it
    "model.rope_theta", "model.norm_eps", "model.init_std", "model.head_dim",
    "model.rope_scaling.factor", "model.rope_scaling.low_freq_factor", "model.rope_scaling.high_freq_factor",
    "model.rope_scaling.original_max_position_embeddings", "model.rope_scaling.beta_fast",
    "model.rope_scaling.beta_slow", "model.rope_scaling.mscale",
    "model.mla.q_lora_rank", "model.mla.kv_lora_rank", "model.mla.qk_rope_head_dim", "model.mla.qk_nope_head_dim",
    "model.mla.v_head_dim", "model.moe.router_topk_scaling_factor", "model.moe.capacity_factor",
    "model.moe.shared_expert_ffn_hidden_size", "model.sliding_window", "model.swiglu_limit",
    "model.final_logit_softcap", "model.global_attention.head_dim", "model.global_attention.num_kv_heads",
    "model.global_attention.rope_theta", "model.global_attention.rope_fraction",
    "module.lr", "module.lr_decay_iters", "backend.num_threads", "sweep.probe_steps", "module.eval_interval", "module.eval_iters",
    "task.objective_window",
)
NON_NEGATIVE = (
    "model.rope_scaling.mscale_all_dim", "model.moe.shared_experts", "model.moe.aux_loss_coeff",
    "model.moe.z_loss_coeff", "model.moe.router_bias_update_rate", "model.full_attention_every",
    "module.exit_interval",  # 0 or null: no early exit (Megatron's meaning)
)


def number_failures(cfg: DictConfig, leaves: Mapping[str, Any]) -> list[str]:
    """`leaves`: the config's scalar values by dotted key, resolved (config/validate.py reads them once)."""
    # a value derived from a bad one (min_lr=${...lr...}) is dropped by validate_config (config/derived_values.py)
    failures = [f"{key}={value}: must be a finite number" for key, value in leaves.items()
                if isinstance(value, float) and not math.isfinite(value)]
    if failures:  # the ranges below would repeat the same keys
        return failures
    for key in POSITIVE:
        value = leaves.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            failures.append(f"{key}={value}: must be {'>= 1' if isinstance(value, int) else '> 0'}"
                            f"{' (or null)' if _nullable(cfg, key) else ''}")
    for key in NON_NEGATIVE:
        value = leaves.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            failures.append(f"{key}={value}: must be >= 0")
    seed = cfg.module.seed
    if not 0 <= seed < SEED_LIMIT:
        failures.append(f"module.seed={seed}: must be in [0, 2^63)")
    return failures


def _nullable(cfg: DictConfig, key: str) -> bool:
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent)._get_node(leaf)
    return bool(node._is_optional())
