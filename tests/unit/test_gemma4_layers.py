"""Gemma 4's layers in the canonical model (model.family=gemma4 with model.activation, final_logit_softcap and
model.global_attention.*): per-layer attention shapes in the counts and FLOPs, the number rules, MaxText's gemma4
decoder block as the one backend that builds them (its dry run writes the block's keys), every other backend one
line before anything starts. The presets' counts are transformers' Gemma4 (tests/integration/test_gemma4_count.py)."""
from __future__ import annotations

import pytest
import yaml

from helpers.compose import run_job
from primus_hydra.config import model_math
from primus_hydra.config.attention_math import layer_attention_shape
from primus_hydra.config.attention_window import is_sliding_window_layer
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare

GEMMA4 = ("model=gemma4_31b", "backend=maxtext", "module.data.source=mock")


def failures_of(compose_config, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as raised:
        prepare(compose_config(*overrides))
    return raised.value.failures


def test_the_global_layers_are_every_sixth_and_have_their_own_heads(compose_config):
    model = compose_config(*GEMMA4).model
    globals_ = [layer for layer in range(model.num_layers) if not is_sliding_window_layer(model, layer)]
    assert globals_ == list(range(5, 60, 6))
    assert layer_attention_shape(model, 0) == (256, 16, False)
    assert layer_attention_shape(model, 5) == (512, 4, True)


def test_k_equals_v_saves_the_value_projection_of_each_global_layer(compose_config):
    shared = compose_config(*GEMMA4).model
    separate = compose_config(*GEMMA4, "model.global_attention.shared_kv=false").model
    assert model_math.count_parameters(separate) - model_math.count_parameters(shared) == 10 * 5376 * 4 * 512


def test_the_flops_count_each_layers_own_head_width_and_window(compose_config):
    model, seq = compose_config(*GEMMA4).model, 4096
    attention = 6 * 32 * (50 * 1024 * (256 + 256) + 10 * seq * (512 + 512))
    expected = 6 * model_math.count_active_matmul_parameters(model) + attention
    assert model_math.training_flops_per_token(model, seq) == expected


def test_the_26b_moe_counts_gemma4s_router_scales_and_branch_norms(compose_config):
    model = compose_config("model=gemma4_26b", "backend=maxtext").model
    plain = compose_config("model=gemma4_26b", "backend=maxtext", "model.family=llama").model
    # per layer: 2 post norms, 3 branch norms and the router's input scale (h each), 128 per-expert scales
    assert model_math.count_parameters(model) - model_math.count_parameters(plain) == 30 * (6 * 2816 + 128)


@pytest.mark.parametrize("override, expected", [
    ("model.global_attention.rope_fraction=1.5", "model.global_attention.rope_fraction=1.5: must be in (0, 1] (the "
     "share of each head's channels RoPE rotates)"),
    ("model.global_attention.num_kv_heads=5", "model.global_attention.num_kv_heads=5: must divide "
     "model.num_attention_heads=32 (GQA groups must be equal)"),
    ("model.final_logit_softcap=0", "model.final_logit_softcap=0.0: must be > 0 (or null)"),
])
def test_a_bad_gemma4_value_is_one_line(compose_config, override, expected):
    assert expected in failures_of(compose_config, *GEMMA4, "task.dry_run=true", override)


def test_maxtexts_dry_run_writes_its_gemma4_block(compose_config, tmp_path):
    run_job(compose_config(*GEMMA4, "task.dry_run=true"), tmp_path)
    args = yaml.safe_load((tmp_path / "backend_args.yaml").read_text())
    assert {key: args[key] for key in ("decoder_block", "global_head_dim", "global_num_kv_heads", "share_kv_projections",
                                       "global_rope_proportion", "final_logits_soft_cap", "mlp_activations")} == {
        "decoder_block": "gemma4", "global_head_dim": 512, "global_num_kv_heads": 4, "share_kv_projections": True,
        "global_rope_proportion": 0.25, "final_logits_soft_cap": 30.0, "mlp_activations": ["gelu", "linear"]}


@pytest.mark.parametrize("backend", ["torch", "megatron", "megatron_bridge", "torchtitan"])
def test_a_backend_without_them_is_one_line_naming_each_key(compose_config, backend):
    failures = failures_of(compose_config, "model=gemma4_31b", f"backend={backend}", "module.data.source=mock",
                           "task.dry_run=true")
    assert ("model.family=gemma4, model.sliding_window=1024, model.activation=geglu, model.final_logit_softcap=30.0, "
            "model.global_attention.head_dim=512, model.global_attention.num_kv_heads=4, "
            "model.global_attention.shared_kv=true, model.global_attention.rope_theta=1000000.0, "
            f"model.global_attention.rope_fraction=0.25: backend={backend} does not build Gemma 4's layers "
            "(model=gemma4_31b); backend=maxtext does (its gemma4 decoder block), or unset them") in failures
    assert not any("gpt-oss" in line or "gpt_oss" in line for line in failures)  # its window is Gemma 4's


@pytest.mark.parametrize("overrides, expected", [
    (["model.family=llama"], "model.activation=geglu, model.final_logit_softcap=30.0, model.global_attention.head_dim="
     "512, model.global_attention.num_kv_heads=4, model.global_attention.shared_kv=true, model.global_attention."
     "rope_theta=1000000.0, model.global_attention.rope_fraction=0.25: MaxText builds Gemma 4's layers in its gemma4 "
     "decoder block only; set model.family=gemma4 (model=gemma4_31b)"),
    (["model.full_attention_every=2"], "model.sliding_window=1024, model.full_attention_every=2: MaxText's gemma4 "
     "block has 5 sliding-window layers to each global one (a window and full_attention_every=6)"),
    (["model.qk_norm=false"], "model.qk_norm=false: MaxText's gemma4 block normalises q and k in every layer "
     "(qk_norm=true)"),
])
def test_what_maxtexts_gemma4_block_fixes_is_one_line(compose_config, overrides, expected):
    assert expected in failures_of(compose_config, *GEMMA4, "task.dry_run=true", *overrides)
