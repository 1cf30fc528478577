"""The maps between backend=torch's weights and megatron-core's GPTModel (backends/megatron/convert.py): one table
read both ways, so a round trip is the identity for every layer kind (dense, routed experts with a shared expert and
an expert bias, tied embeddings, QKV bias and QK norm), and the fused Megatron tensors are laid out as Megatron
reads them."""
from __future__ import annotations

import pytest
import torch

from primus_hydra.backends.megatron.convert import megatron_to_native, native_to_megatron, pad_vocabulary
from primus_hydra.backends.torch.model import Transformer

MODELS = {
    "dense": ("model=llama_tiny",),
    "tied, qkv bias, qk norm": ("model=llama_tiny", "model.tie_embeddings=true", "model.qkv_bias=true",
                                "model.qk_norm=true"),
    "moe": ("model=moe_tiny",),
    "moe with a dense layer, a shared expert and an expert bias": (
        "model=moe_tiny", "model.moe.first_dense_layers=1", "model.moe.shared_experts=1",
        "model.moe.router_enable_expert_bias=true", "model.num_kv_heads=2"),
}


def _native_weights(model) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {name: torch.randn(*tensor.shape, generator=generator) for name, tensor in
            Transformer(model).state_dict().items()}


@pytest.mark.parametrize("overrides", list(MODELS.values()), ids=list(MODELS))
def test_a_round_trip_through_megatron_names_is_the_identity(compose_config, overrides):
    model = compose_config(*overrides).model
    native = _native_weights(model)

    back = megatron_to_native(pad_vocabulary(native_to_megatron(native, model), model.vocab_size + 128), model)

    assert sorted(back) == sorted(native) and all(torch.equal(back[name], native[name]) for name in native)


def test_megatron_fuses_swiglu_and_groups_qkv_by_query_group(compose_config):
    model = compose_config("model=llama_tiny").model
    native = _native_weights(model)
    heads, groups = model.num_attention_heads, model.num_kv_heads
    head_dim = model.hidden_size // heads

    megatron = native_to_megatron(native, model)

    fc1 = megatron["decoder.layers.0.mlp.linear_fc1.weight"]
    assert torch.equal(fc1, torch.cat([native["layers.0.feed_forward.w1.weight"],
                                       native["layers.0.feed_forward.w3.weight"]]))
    qkv = megatron["decoder.layers.0.self_attention.linear_qkv.weight"]
    first_group = qkv[: (heads // groups + 2) * head_dim]
    wq, wk = native["layers.0.attention.wq.weight"], native["layers.0.attention.wk.weight"]
    assert torch.equal(first_group[: heads // groups * head_dim], wq[: heads // groups * head_dim])
    assert torch.equal(first_group[heads // groups * head_dim:][:head_dim], wk[:head_dim])


def test_routed_experts_become_megatrons_local_experts(compose_config):
    model = compose_config("model=moe_tiny").model
    native = _native_weights(model)

    megatron = native_to_megatron(native, model)

    experts = sorted(name for name in megatron if name.startswith("decoder.layers.0.mlp.experts."))
    assert experts == sorted(f"decoder.layers.0.mlp.experts.local_experts.{e}.linear_fc{n}.weight"
                             for e in range(model.moe.num_experts) for n in (1, 2))
    assert torch.equal(megatron["decoder.layers.0.mlp.experts.local_experts.3.linear_fc2.weight"],
                       native["layers.0.feed_forward.w2"][3])
