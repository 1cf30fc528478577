"""The maps between backend=torch's weights and torchtitan's (native_init.py, used by the initialisation and by
checkpoint conversion both ways): MoE names, the rotary rows torchtitan orders pairwise, and that a round trip is
the identity; and what torchtitan's MoE and YaRN do differently, said once as warnings."""
from __future__ import annotations

import torch

from primus_hydra.backends.base import load_adapter
from primus_hydra.backends.torchtitan.convert import native_to_torchtitan, torchtitan_to_native
from primus_hydra.backends.torchtitan.native_init import RotaryRows, rotary_rows
from primus_hydra.config.layout import parallel_layout

DEEPSEEK = ("model=deepseek_v3", "model.num_layers=2", "model.moe.first_dense_layers=1", "model.mla.q_lora_rank=16",
            "model.mla.kv_lora_rank=32", "model.mla.qk_rope_head_dim=8", "model.mla.qk_nope_head_dim=16")


def _weights(names_and_shapes: dict) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {name: torch.randn(*shape, generator=generator) for name, shape in names_and_shapes.items()}


def test_moe_names_and_latent_rotary_rows_map_both_ways(compose_config):
    model = compose_config(*DEEPSEEK).model
    native = _weights({"layers.1.feed_forward.w1": (8, 4, 6), "layers.1.feed_forward.router.weight": (8, 6),
                       "layers.1.feed_forward.shared.w2.weight": (6, 4), "layers.1.feed_forward.expert_bias": (8,),
                       "layers.0.attention.wq_b.weight": (2 * 24, 16), "layers.0.attention.wkv_a.weight": (40, 6),
                       "layers.0.feed_forward.w1.weight": (4, 6)})  # a dense layer: the same name in both
    titan = native_to_torchtitan(native, model)
    assert sorted(titan) == ["layers.0.attention.wkv_a.weight", "layers.0.attention.wq_b.weight",
                             "layers.0.feed_forward.w1.weight",
                             "layers.1.moe.expert_bias", "layers.1.moe.experts.w1", "layers.1.moe.router.gate.weight",
                             "layers.1.moe.shared_experts.w2.weight"]
    wq, converted = native["layers.0.attention.wq_b.weight"], titan["layers.0.attention.wq_b.weight"]
    assert torch.equal(converted[:16], wq[:16]) and torch.equal(converted[24:40], wq[24:40])  # nope rows stay
    assert torch.equal(converted[16:24:2], wq[16:20]) and torch.equal(converted[17:24:2], wq[20:24])  # rope pairs
    kv, converted = native["layers.0.attention.wkv_a.weight"], titan["layers.0.attention.wkv_a.weight"]
    assert torch.equal(converted[:32], kv[:32]) and torch.equal(converted[32::2], kv[32:36])
    back = torchtitan_to_native(titan, model)
    assert sorted(back) == sorted(native) and all(torch.equal(back[name], native[name]) for name in native)


def test_which_rows_are_rotary_per_family(compose_config):
    llama, qwen3, deepseek = (compose_config(f"model={name}").model for name in ("llama3_8b", "qwen3_8b", "deepseek_v3"))
    assert rotary_rows("layers.0.attention.wk.weight", llama) == RotaryRows(128, 0, 128)
    assert rotary_rows("layers.0.attention.wv.weight", llama) is None
    assert rotary_rows("layers.0.attention.wq.weight", qwen3) is None  # rotate-half, as backend=torch
    assert rotary_rows("layers.0.attention.wq_b.weight", deepseek) == RotaryRows(192, 128, 64)
    assert rotary_rows("layers.0.attention.wkv_a.weight", deepseek) == RotaryRows(576, 512, 64)


def test_what_torchtitans_moe_and_yarn_do_differently_are_warnings(compose_config):
    cfg = compose_config("backend=torchtitan", "model=deepseek_v3", "module.seq_length=4096")
    warnings = load_adapter(cfg, parallel_layout(cfg, 1)).warnings()
    assert [line.split(":")[0] for line in warnings] == ["model.moe.load_balancing_type=seq_aux_loss",
                                                         "model.rope_scaling.type=yarn"]
    assert "aux_loss_coeff=0.001 is not applied" in warnings[0]
    cfg = compose_config("backend=torchtitan", "model=llama3_8b")
    assert load_adapter(cfg, parallel_layout(cfg, 1)).warnings() == []
