"""A Megatron MoE preset with megatron-core's global-batch balancing loss (Primus's qwen3_5_35B_A3B) or DeepSeek-V4's
sqrtsoftplus score function (Primus's deepseek_v4_flash) imports with both held by the canonical model
(model.moe.load_balancing_type, model.moe.router_score_function), and the dry run exports exactly Primus's values."""
from __future__ import annotations

import pytest
import yaml

from helpers.primus_tree import META, write_primus_tree
from primus_hydra.migrate.primus_yaml import load_experiment
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node, import_files

MOE = """\
    extends:
      - language_model.yaml
    num_layers: 4
    hidden_size: 256
    ffn_hidden_size: 512
    num_attention_heads: 8
    num_experts: 8
    moe_router_topk: 2
    moe_ffn_hidden_size: 128
    moe_layer_freq: 1
    moe_aux_loss_coeff: 0.001
    rotary_base: 10000
    max_position_embeddings: 4096
    """
EXPERIMENT = META + """\
    modules:
      pre_trainer:
        framework: megatron
        config: pre_trainer.yaml
        model: routed.yaml
        overrides: {train_iters: 5}
    """


@pytest.mark.parametrize("keys, expected", [
    ({"moe_router_load_balancing_type": "global_aux_loss"}, {"load_balancing_type": "global_aux_loss"}),
    ({"moe_router_score_function": "sqrtsoftplus", "moe_router_enable_expert_bias": True,
      "moe_router_bias_update_rate": 0.001, "moe_router_load_balancing_type": "seq_aux_loss"},
     {"router_score_function": "sqrtsoftplus", "router_enable_expert_bias": True}),
    # sigmoid scores, a shared expert, the expert bias: the closest zoo shape is Llama 4's, whose scores on the
    # experts' inputs and interleaved layers must not come along
    ({"moe_router_topk": 1, "moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True,
      "moe_router_bias_update_rate": 0.001, "moe_shared_expert_intermediate_size": 128},
     {"router_score_function": "sigmoid", "score_before_experts": False, "interleave_step": 1}),
    ({"moe_router_topk": 1, "moe_apply_probs_on_input": True, "moe_router_score_function": "sigmoid",
      "moe_shared_expert_intermediate_size": 128}, {"top_k": 1, "score_before_experts": True}),
], ids=["global_aux_loss", "sqrtsoftplus", "sigmoid_shared", "probs_on_input"])
def test_a_routing_variant_imports_onto_the_canonical_model_and_exports_exactly(tmp_path, keys, expected):
    lines = [line for line in MOE.splitlines(keepends=True) if line.split(":")[0].strip() not in keys]
    preset = "".join(lines).rstrip(" ") + "".join(f"    {key}: {str(value).lower()}\n" for key, value in keys.items())
    tree = write_primus_tree(tmp_path / "primus", {"primus/configs/models/megatron/routed.yaml": preset,
                                                   "examples/megatron/routed-pretrain.yaml": EXPERIMENT})
    out = tmp_path / "conf"
    (result,) = import_files([tree / "examples/megatron/routed-pretrain.yaml"], tree / "examples", tree, out, {})
    assert result.failure == "", result.failure
    model = yaml.safe_load((out / "model" / "routed_primus.yaml").read_text())
    experiment = yaml.safe_load((out / "experiment" / f"{result.name}.yaml").read_text())
    moe = {**model["moe"], **experiment.get("model", {}).get("moe", {})}
    assert {key: moe[key] for key in expected} == expected
    loaded = load_experiment(result.source, tree, {})
    assert dry_run_mismatches(result.name, out, "megatron", loaded.modules[0].params, tmp_path / "run",
                              gpus_per_node(loaded)) == []


def test_a_megatron_preset_named_gpt_oss_keeps_megatrons_layers(tmp_path):
    """Primus's Megatron gpt_oss_20B preset is a plain GQA MoE of gpt-oss-20b's sizes (no sinks, windows or biases):
    it is never based on the zoo's gpt_oss_20b, the closest shape, whose layers megatron does not build, and exports
    exactly Primus's values."""
    preset = """\
    extends:
      - language_model.yaml
    num_layers: 24
    hidden_size: 2880
    ffn_hidden_size: 10944
    num_attention_heads: 64
    group_query_attention: true
    num_query_groups: 8
    kv_channels: 64
    num_experts: 32
    moe_router_topk: 4
    moe_ffn_hidden_size: 2880
    moe_layer_freq: 1
    rotary_base: 10000
    max_position_embeddings: 4096
    """
    tree = write_primus_tree(tmp_path / "primus", {"primus/configs/models/megatron/gpt_oss_20B.yaml": preset,
                                                   "examples/megatron/gpt_oss-pretrain.yaml":
                                                       EXPERIMENT.replace("routed.yaml", "gpt_oss_20B.yaml")})
    out = tmp_path / "conf"
    (result,) = import_files([tree / "examples/megatron/gpt_oss-pretrain.yaml"], tree / "examples", tree, out, {})
    assert result.failure == "", result.failure
    model = yaml.safe_load((out / "model" / "gpt_oss_20b_primus.yaml").read_text())
    assert model["family"] != "gpt_oss" and not model.get("attention_sinks") and model.get("sliding_window") is None
    loaded = load_experiment(result.source, tree, {})
    assert dry_run_mismatches(result.name, out, "megatron", loaded.modules[0].params, tmp_path / "run",
                              gpus_per_node(loaded)) == []
