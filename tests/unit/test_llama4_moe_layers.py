"""Llama 4's MoE layers in the canonical model: dense and MoE layers interleaved (model.moe.interleave_step) and the
router's weight on the expert's input (model.moe.score_before_experts). One rule for which layer is MoE
(model_math.is_moe_layer) serves the counts, the projection, the native model and the translations; megatron gets the
whole layer pattern (its own every-n-th starts at layer 0) and moe_apply_probs_on_input; a backend that does not
translate them, or megatron-core with top_k > 1, is one line before anything starts."""
from __future__ import annotations

import pytest

from helpers.overrides import LLAMA4_TINY
from primus_hydra.backends.megatron.args import moe_args
from primus_hydra.config import model_math
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.projection.parameters import layer_parameters


def failures_of(compose_config, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as raised:
        prepare(compose_config(*overrides))
    return raised.value.failures


def test_every_second_layer_is_moe_counting_from_one(compose_config):
    model = compose_config("model=llama4_17bx128e").model
    assert [model_math.is_moe_layer(model, layer) for layer in range(6)] == [False, True] * 3
    # the projection's per-layer weights: a dense layer has no routed experts, an MoE layer 128 of them
    assert layer_parameters(model, 0)[2] == 0
    assert layer_parameters(model, 1)[2] == 128 * 3 * 5120 * 8192
    dense = compose_config("model=llama4_17bx128e", "model.moe.first_dense_layers=3").model
    assert [model_math.is_moe_layer(dense, layer) for layer in range(6)] == [False, False, False, True, False, True]


def test_megatron_gets_the_layer_pattern_and_the_scores_on_the_inputs(compose_config):
    args = moe_args(compose_config(*LLAMA4_TINY).model)
    assert (args["moe_layer_freq"], args["moe_apply_probs_on_input"]) == ("[0,1]", True)
    plain = moe_args(compose_config("model=moe_tiny").model)
    assert (plain["moe_layer_freq"], plain["moe_apply_probs_on_input"]) == (1, False)


def test_a_backend_that_does_not_translate_them_says_so_in_one_line(compose_config):
    failures = failures_of(compose_config, "backend=maxtext", *LLAMA4_TINY, "task.dry_run=true")
    assert ("model.moe.interleave_step=2: backend=maxtext does not translate Llama 4's MoE layers; backend=torch, "
            "megatron, megatron_bridge and torchtitan do (model=llama4_17bx128e)") in failures
    assert ("model.moe.score_before_experts=true: backend=maxtext does not translate Llama 4's MoE layers; "
            "backend=torch, megatron, megatron_bridge and torchtitan do (model=llama4_17bx128e)") in failures


def test_megatron_core_weights_the_input_of_one_expert_only(compose_config):
    failures = failures_of(compose_config, "backend=megatron", *LLAMA4_TINY, "model.moe.top_k=2", "task.dry_run=true")
    assert failures == ["model.moe.score_before_experts=true with model.moe.top_k=2: megatron-core weights the "
                        "expert's input (moe_apply_probs_on_input) with one expert per token only; set model.moe.top_k=1"]


def test_torchtitan_interleaves_only_its_llama4_and_derives_the_experts_width(compose_config):
    failures = failures_of(compose_config, "backend=torchtitan", *LLAMA4_TINY, "model.moe.ffn_hidden_size=96",
                           "task.dry_run=true")
    assert failures == ["model.moe.ffn_hidden_size=96: torchtitan's llama4 derives its experts' width from "
                        "model.ffn_hidden_size=192: 128 or 192 (model=llama4_17bx128e)"]
    failures = failures_of(compose_config, "backend=torchtitan", "model=qwen3_30b_a3b", "model.moe.interleave_step=2",
                           "module.data.source=mock")
    assert ("model.moe.interleave_step=2: of torchtitan's models only llama4 interleaves dense and MoE layers "
            "(model=qwen3_30b_a3b, family qwen3)") in failures


def test_interleave_step_must_be_at_least_one(compose_config):
    failures = failures_of(compose_config, *LLAMA4_TINY, "model.moe.interleave_step=0")
    assert ("model.moe.interleave_step=0: must be >= 1 (1: every layer after model.moe.first_dense_layers is an MoE "
            "layer)") in failures
