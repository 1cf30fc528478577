"""Decoding with a KV cache: the cached logits of every step equal a full recompute of the whole sequence (GQA,
MLA, MoE), chunks after a cached prefix see the right positions, greedy decoding is the argmax, and sampling is
reproducible from its seed and stays inside the top-p nucleus."""
from __future__ import annotations

import pytest
import torch

from primus_hydra.backends.torch.generation import Sampling, choose_token, generate
from primus_hydra.backends.torch.model import KVCache, build_model_on_meta, materialize

DEEPSEEK_V3_TINY = [
    "model=deepseek_v3", "model.hidden_size=64", "model.num_layers=2", "model.num_attention_heads=4",
    "model.num_kv_heads=4", "model.ffn_hidden_size=96", "model.vocab_size=256", "model.mla.q_lora_rank=32",
    "model.mla.kv_lora_rank=16", "model.mla.qk_rope_head_dim=8", "model.mla.qk_nope_head_dim=16",
    "model.mla.v_head_dim=16", "model.moe.num_experts=8", "model.moe.top_k=2", "model.moe.ffn_hidden_size=32",
    "model.moe.router_num_groups=4", "model.moe.router_group_topk=2", "model.moe.first_dense_layers=1",
    "model.moe.router_bias_update_rate=0.001",
]
FAMILIES = {
    "gqa": ["model=llama_tiny", "model.num_kv_heads=2"],
    "qk_norm_bias_tied": ["model=llama_tiny", "model.qk_norm=true", "model.qkv_bias=true", "model.tie_embeddings=true"],
    "moe": ["model=moe_tiny"],
    "deepseek_v3_mla_moe": DEEPSEEK_V3_TINY,
    "yarn_rope": [*DEEPSEEK_V3_TINY, "model.rope_scaling.type=yarn", "model.rope_scaling.factor=4"],
}


def _tiny(compose_config, overrides):
    model = materialize(build_model_on_meta(compose_config(*overrides).model), torch.device("cpu"), seed=0)
    for parameter in model.parameters():  # random expert bias: routing that the bias shifts must match too
        if parameter.dim() == 1 and parameter.shape[0] == model.args.moe.num_experts:
            parameter.data.normal_(0, 0.1, generator=torch.Generator().manual_seed(1))
    return model.eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_cached_decoding_logits_equal_a_full_recompute(compose_config, family):
    model = _tiny(compose_config, FAMILIES[family])
    prompt = torch.randint(0, 256, (10,), generator=torch.Generator().manual_seed(0)).tolist()
    result = generate(model, prompt, max_new_tokens=6, keep_logits=True)
    with torch.no_grad():
        full = model(torch.tensor([prompt + result.tokens]))[0].float()
    for step, logits in enumerate(result.logits):
        torch.testing.assert_close(logits, full[len(prompt) - 1 + step], atol=1e-5, rtol=0)
    assert model.moe_aux_loss().item() == 0  # inference: no balancing loss (and no expert bias update)


def test_a_chunk_after_a_cached_prefix_sees_its_own_positions(compose_config):
    model = _tiny(compose_config, FAMILIES["gqa"])
    tokens = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(0))
    cache = KVCache()
    with torch.no_grad():
        first, rest = model(tokens[:, :5], cache=cache), model(tokens[:, 5:], cache=cache)
        full = model(tokens)
    assert cache.length == 12
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=0)


def test_greedy_decoding_follows_the_argmax_and_stops_at_eos(compose_config):
    model = _tiny(compose_config, FAMILIES["gqa"])
    result = generate(model, [1, 2, 3], max_new_tokens=5, keep_logits=True)
    assert result.tokens == [int(logits.argmax()) for logits in result.logits]
    stopped = generate(model, [1, 2, 3], max_new_tokens=5, eos_token_ids=[result.tokens[1]])
    assert stopped.tokens == result.tokens[:2] and stopped.stopped_at_eos


def test_sampling_is_reproducible_from_its_seed(compose_config):
    model = _tiny(compose_config, FAMILIES["gqa"])
    hot = Sampling(temperature=5.0, seed=3)
    first = generate(model, [1, 2, 3], max_new_tokens=12, sampling=hot).tokens
    assert generate(model, [1, 2, 3], max_new_tokens=12, sampling=hot).tokens == first
    assert generate(model, [1, 2, 3], max_new_tokens=12, sampling=Sampling(temperature=5.0, seed=4)).tokens != first


def test_top_p_draws_only_from_the_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    generator = torch.Generator().manual_seed(0)
    drawn = {choose_token(logits, Sampling(temperature=1.0, top_p=0.7), generator) for _ in range(200)}
    assert drawn == {0, 1}
    assert choose_token(logits, Sampling(temperature=1.0, top_p=0.1), generator) == 0
