"""The native model: every zoo preset builds on the meta device with the closed-form parameter count; forward
passes of the dense, MoE and MLA variants produce the right shapes and gradients."""
from __future__ import annotations

import pytest
import torch
from test_model_zoo import PRESETS  # noqa: E402

from primus_hydra.backends.torch.model import build_model_on_meta, materialize, rope_inverse_frequencies
from primus_hydra.config.model_math import count_parameters


# gpt_oss's layers are torchtitan's only (backend=torch refuses them; test_gpt_oss_layers), hybrid models megatron-core's,
# Gemma 4's MaxText's
@pytest.mark.parametrize("name", [name for name in PRESETS if not name.startswith(("gpt_oss", "mamba", "zebra", "gemma4"))])
def test_meta_model_has_the_closed_form_parameter_count(name, compose_config):
    model_cfg = compose_config(f"model={name}").model
    model = build_model_on_meta(model_cfg)
    assert all(p.is_meta for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == count_parameters(model_cfg)


def test_llama3_8b_count_is_the_published_one(compose_config):
    model = build_model_on_meta(compose_config("model=llama3_8b").model)
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248


def _tiny(compose_config, *overrides):
    cfg = compose_config(*overrides).model
    return materialize(build_model_on_meta(cfg), torch.device("cpu"), seed=0)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=llama_tiny"],
        ["model=moe_tiny"],
        ["model=llama_tiny", "model.qk_norm=true", "model.qkv_bias=true", "model.tie_embeddings=true"],
        # a shrunken DeepSeek-V3: MLA with q LoRA, sigmoid group-limited routing, expert bias, shared expert, dense first layer
        ["model=deepseek_v3", "model.hidden_size=64", "model.num_layers=2", "model.num_attention_heads=4", "model.num_kv_heads=4",
         "model.ffn_hidden_size=96", "model.vocab_size=256", "model.mla.q_lora_rank=32", "model.mla.kv_lora_rank=16",
         "model.mla.qk_rope_head_dim=8", "model.mla.qk_nope_head_dim=16", "model.mla.v_head_dim=16", "model.moe.num_experts=8",
         "model.moe.top_k=2", "model.moe.ffn_hidden_size=32", "model.moe.router_num_groups=4", "model.moe.router_group_topk=2",
         "model.moe.first_dense_layers=1", "model.moe.router_bias_update_rate=0.001"],
        ["model=deepseek_v2_lite", "model.hidden_size=64", "model.num_layers=2", "model.num_attention_heads=4",
         "model.num_kv_heads=4", "model.ffn_hidden_size=96", "model.vocab_size=256", "model.mla.kv_lora_rank=16",
         "model.mla.qk_rope_head_dim=8", "model.mla.qk_nope_head_dim=16", "model.mla.v_head_dim=16",
         "model.moe.num_experts=8", "model.moe.ffn_hidden_size=32"],
    ],
    ids=["dense", "moe", "qk_norm_bias_tied", "deepseek_v3_mla_moe", "deepseek_v2_lite_mla"],
)
def test_forward_and_backward(compose_config, overrides):
    model = _tiny(compose_config, *overrides)
    tokens = torch.randint(0, model.args.vocab_size, (2, 16))
    logits = model(tokens)
    assert logits.shape == (2, 16, model.args.vocab_size)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tokens.view(-1)) + model.moe_aux_loss()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_moe_balancing_loss_is_positive_and_expert_bias_moves(compose_config):
    model = _tiny(compose_config, "model=moe_tiny", "model.moe.router_enable_expert_bias=true", "model.moe.router_bias_update_rate=0.01")
    model(torch.randint(0, 256, (2, 32)))
    assert model.moe_aux_loss().item() > 0
    assert any(layer.feed_forward.expert_bias.abs().sum() > 0 for layer in model.layers.values())


def test_causality_future_tokens_do_not_change_past_logits(compose_config):
    model = _tiny(compose_config, "model=llama_tiny")
    tokens = torch.randint(0, 256, (1, 12))
    changed = tokens.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 256
    assert torch.allclose(model(tokens)[0, :8], model(changed)[0, :8], atol=1e-6)


def test_llama3_rope_scaling_keeps_high_and_divides_low_frequencies(compose_config):
    model_cfg = compose_config("model=llama3.1_8b").model
    scaled = rope_inverse_frequencies(128, model_cfg.rope_theta, model_cfg.rope_scaling)
    plain = rope_inverse_frequencies(128, model_cfg.rope_theta, compose_config("model=llama3_8b").model.rope_scaling)
    assert torch.equal(scaled[0], plain[0])
    assert torch.allclose(scaled[-1], plain[-1] / model_cfg.rope_scaling.factor)


def test_same_seed_same_weights(compose_config):
    a = _tiny(compose_config, "model=llama_tiny")
    b = _tiny(compose_config, "model=llama_tiny")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
