"""gpt-oss's layers in the canonical model: attention sinks, a sliding window on every other layer, biases on the
attention output, the router and the experts, the clamped SwiGLU (model.attention_sinks, sliding_window,
full_attention_every, attention_output_bias, swiglu_limit, moe.router_bias, moe.experts_bias). The counts are
torchtitan's (test_import_torchtitan_flavors builds both presets on the meta device); torchtitan's gpt_oss translates
them, every other backend is one line before anything starts; on the CPU the flex attention gpt_oss needs runs as
eager ops that give what torch's own flex kernel gives."""
from __future__ import annotations

import pytest

from helpers.overrides import GPT_OSS_TINY
from primus_hydra.backends.torchtitan.args import model_args_section
from primus_hydra.config import model_math
from primus_hydra.config.attention_window import is_sliding_window_layer
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare


def failures_of(compose_config, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as raised:
        prepare(compose_config(*overrides))
    return raised.value.failures


def test_the_presets_have_the_published_counts(compose_config):
    # Hugging Face's checkpoints: 20,914,757,184 and 116,829,156,672 weights; torchtitan adds one expert-bias entry
    # per expert and layer (its aux-loss-free balancing)
    small, large = (compose_config(f"model=gpt_oss_{size}").model for size in ("20b", "120b"))
    assert model_math.count_parameters(small) == 20_914_757_184 + 24 * 32
    assert model_math.count_parameters(large) == 116_829_156_672 + 36 * 128
    # the model card's 3.6B active parameters exclude the input embedding
    active = model_math.count_active_parameters(small) - model_math.count_embedding_parameters(small)
    assert round(active / 1e9, 2) == 3.61


def test_the_window_is_on_even_layers_and_counts_its_keys_in_the_flops(compose_config):
    model = compose_config("model=gpt_oss_20b").model
    assert [is_sliding_window_layer(model, layer) for layer in range(4)] == [True, False, True, False]
    per_layer = 6 * 64 * (64 + 64)  # heads x (query/key + value head width)
    full = model_math.training_flops_per_token(model, 4096)
    assert full == 6 * model_math.count_active_matmul_parameters(model) + per_layer * 12 * (4096 + 128)
    everywhere = compose_config("model=gpt_oss_20b", "model.full_attention_every=0").model
    assert model_math.training_flops_per_token(everywhere, 4096) == full - per_layer * 12 * (4096 - 128)
    assert model_math.training_flops_per_token(model, 64) == model_math.training_flops_per_token(everywhere, 64)


def test_torchtitan_gets_its_gpt_oss_args(compose_config):
    args = model_args_section(compose_config(*GPT_OSS_TINY).model, 64)
    assert {key: args[key] for key in ("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "moe_inter_dim",
                                       "swiglu_limit", "sliding_window_size", "rope_factor", "original_seq_len",
                                       "ntk_alpha", "ntk_beta", "attn_type")} == {
        "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "moe_inter_dim": 32,
        "swiglu_limit": 7.0, "sliding_window_size": 4, "rope_factor": 32.0, "original_seq_len": 4096,
        "ntk_alpha": 1.0, "ntk_beta": 32.0, "attn_type": "flex"}
    assert (args["moe_args"]["gate_bias"], args["moe_args"]["top_k"], args["moe_args"]["route_norm"]) == (True, 2, True)


def test_a_backend_without_them_is_one_line_naming_each_key(compose_config):
    failures = failures_of(compose_config, "backend=torch", *GPT_OSS_TINY)
    assert failures == ["model.attention_sinks=true, model.sliding_window=4, model.attention_output_bias=true, "
                        "model.swiglu_limit=7.0, model.moe.router_bias=true, model.moe.experts_bias=true: "
                        "backend=torch does not build gpt-oss's layers (model=gpt_oss_20b); backend=torchtitan does "
                        "(its gpt_oss model), or unset them"]
    assert len(failures_of(compose_config, "backend=megatron", *GPT_OSS_TINY, "task.dry_run=true")) == 1


def test_torchtitan_has_them_in_its_gpt_oss_only_and_all_of_them(compose_config):
    failures = failures_of(compose_config, "backend=torchtitan", *GPT_OSS_TINY, "model.full_attention_every=3",
                           "model.moe.experts_bias=false", "task.dry_run=true")
    assert failures == ["model.full_attention_every=3: torchtitan's gpt_oss has 2 (model=gpt_oss_20b)",
                        "model.moe.experts_bias=false: torchtitan's gpt_oss has true (model=gpt_oss_20b)"]
    failures = failures_of(compose_config, "backend=torchtitan", "model=llama_tiny", "model.attention_sinks=true",
                           "task.dry_run=true")
    assert failures == ["model.attention_sinks=true: of torchtitan's models only gpt_oss has it (model=llama_tiny, "
                        "family llama)"]


# torch's reference: flex_attention uncompiled (its warning says so) with return_lse (deprecated for return_aux)
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile", "ignore:return_lse is deprecated")
@pytest.mark.parametrize("window, heads, kv_heads", [(4, 4, 2), (None, 2, 2)])
def test_the_cpu_flex_attention_gives_torchs_flex_kernel_result(window, heads, kv_heads):
    torch = pytest.importorskip("torch")
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    from primus_hydra.backends.torchtitan.cpu_attention import eager_flex_attention

    def mask_mod(b, h, q, kv):
        allowed = q >= kv
        return allowed & (q - kv < window) if window else allowed

    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, heads, 48, 8, generator=generator)
    key, value = (torch.randn(2, kv_heads, 48, 8, generator=generator) for _ in range(2))
    block_mask = flex.create_block_mask(mask_mod, 1, None, 48, 48, device="cpu")
    expected, expected_lse = flex.flex_attention(query, key, value, block_mask=block_mask, scale=0.3,
                                                 enable_gqa=heads != kv_heads, return_lse=True)
    query.requires_grad_(True)
    output, lse = eager_flex_attention(query, key, value, block_mask=block_mask, scale=0.3,
                                       enable_gqa=heads != kv_heads, return_lse=True)
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse, expected_lse, rtol=1e-5, atol=1e-5)
    (output.sum() + lse.sum()).backward()  # what the CPU flex kernel refuses
    assert torch.isfinite(query.grad).all() and query.grad.abs().sum() > 0
