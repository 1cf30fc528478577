"""Gemma 4's zoo presets (MaxText's gemma4-31b and gemma4-26b sizes) as transformers' own Gemma4ForCausalLM, built
on the meta device from the preset's keys: the same parameter count as the project's model math (config/model_math.py:
per-layer head widths and KV heads, K = V on the global layers, Gemma 4's norms, the MoE branch norms and router
scales). Changing the global heads' width or untying the embeddings moves both counts alike."""
from __future__ import annotations

import pytest

from helpers.compose import compose_primus
from helpers.hf_models import needs_transformers
from primus_hydra.config.model_math import count_parameters

pytestmark = needs_transformers


def transformers_count(model) -> int:
    import torch
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForCausalLM

    wide, moe = model.global_attention, model.moe
    config = Gemma4TextConfig(
        vocab_size=model.vocab_size, hidden_size=model.hidden_size, num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_attention_heads, num_key_value_heads=model.num_kv_heads,
        head_dim=model.head_dim, global_head_dim=wide.head_dim, num_global_key_value_heads=wide.num_kv_heads,
        attention_k_eq_v=wide.shared_kv, intermediate_size=model.ffn_hidden_size, sliding_window=model.sliding_window,
        tie_word_embeddings=model.tie_embeddings, final_logit_softcapping=model.final_logit_softcap,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, enable_moe_block=bool(moe.num_experts),
        num_experts=moe.num_experts or None, top_k_experts=moe.top_k if moe.num_experts else None,
        moe_intermediate_size=moe.ffn_hidden_size or None)
    assert config.layer_types[model.full_attention_every - 1] == "full_attention"  # the global layers: 5, 11, ...
    with torch.device("meta"):
        return sum(param.numel() for param in Gemma4ForCausalLM(config).parameters())


@pytest.mark.parametrize("name", ["gemma4_31b", "gemma4_26b"])
@pytest.mark.parametrize("change", [[], ["model.global_attention.head_dim=384"], ["model.tie_embeddings=false"]])
def test_transformers_builds_gemma4_with_the_model_math_count(name, change):
    model = compose_primus(f"model={name}", "backend=maxtext", *change).model
    assert transformers_count(model) == count_parameters(model)
