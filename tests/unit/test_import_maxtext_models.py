"""task=import of MaxText experiments by model_name: MaxText's qwen3-14b and qwen3-30b-a3b onto their zoo presets
(MaxText's own value where its config is not the model card's), model_name=default as the model its base_* sizes
give over MaxText's base.yml (the backend's translation gives every one back), and Gemma 4 onto its zoo presets,
whose translation is MaxText's own gemma4 model configs."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from helpers.compose import CONF_DIR
from helpers.primus_tree import META, write_primus_tree
from primus_hydra.backends.maxtext.args import model_config
from primus_hydra.config import model_math
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.migrate.maxtext_models import MAXTEXT_BASE_ARCHITECTURE, default_architecture
from primus_hydra.migrate.primus_yaml import load_experiment
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node, import_files

# a Grok-1-shaped preset as Primus's grok1.yaml writes one (model_name=default and MaxText's sizes), made small
TINY_MIXTRAL = """\
model_name: default
decoder_block: mixtral
base_emb_dim: 64
base_num_query_heads: 4
base_num_kv_heads: 2
base_mlp_dim: 128
base_moe_mlp_dim: 128
base_num_decoder_layers: 2
head_dim: 16
mlp_activations: [silu, linear]
vocab_size: 256
num_experts: 4
num_experts_per_tok: 2
rope_max_timescale: 1_000_000
logits_via_embedding: false
normalization_layer_epsilon: 1.0e-5
"""
PRESETS = {
    "qwen3_14B": "model_name: qwen3-14b\n",
    "qwen3_30B_A3B": "model_name: qwen3-30b-a3b\n",
    "tiny_mixtral": TINY_MIXTRAL,
    "base_default": "model_name: default\n",
    "capped": "model_name: default\nfinal_logits_soft_cap: 30.0\n",
    "dense_block_experts": "model_name: default\ndecoder_block: qwen3\nnum_experts: 4\n",
    "gemma4_26B": "model_name: gemma4-26b\n",
    "gemma4_31B": "model_name: gemma4-31b\n",
}


def experiment(preset: str) -> str:
    return META + f"""\
modules:
  pre_trainer:
    framework: maxtext
    config: pre_trainer.yaml
    model: {preset}.yaml
    overrides: {{steps: 5, per_device_batch_size: 1, max_target_length: 1024}}
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    files = {f"primus/configs/models/maxtext/{name}.yaml": text for name, text in PRESETS.items()}
    files.update({f"examples/maxtext/{name}-pretrain.yaml": experiment(name) for name in PRESETS})
    return write_primus_tree(tmp_path_factory.mktemp("primus"), files=files)


@pytest.fixture(scope="module")
def imported(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("conf")
    files = [tree / "examples" / "maxtext" / f"{name}-pretrain.yaml" for name in PRESETS]
    results = import_files(files, tree / "examples", tree, out, {})
    return out, {result.source.name.removesuffix("-pretrain.yaml"): result for result in results}


def zoo_model(name: str):
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))


def written(out: Path, name: str) -> dict:
    return yaml.safe_load((out / "experiment" / "maxtext" / f"{name}-pretrain.yaml").read_text())


def generated_model(out: Path, name: str):
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(out / "model" / f"{name}.yaml"))


def no_mismatch(tree: Path, out: Path, result) -> list:
    module = load_experiment(result.source, tree, {})
    return dry_run_mismatches(result.name, out, "maxtext", module.modules[0].params, str(out / "run" / result.name),
                              gpus_per_node(module), result.passed_keys)


def test_qwen3_14b_imports_onto_its_zoo_preset_exactly(tree, imported):
    out, results = imported
    assert results["qwen3_14B"].failure == "" and results["qwen3_14B"].model == "qwen3_14b"
    assert "model" not in written(out, "qwen3_14B")
    assert no_mismatch(tree, out, results["qwen3_14B"]) == []


def test_qwen3_30b_a3b_keeps_maxtexts_rope_base_which_is_not_the_model_cards(tree, imported):
    out, results = imported
    result = results["qwen3_30B_A3B"]
    assert result.failure == "" and result.model == "qwen3_30b_a3b"
    assert written(out, "qwen3_30B_A3B")["model"] == {"rope_theta": 10_000_000.0}
    assert result.warnings == ("model_name=qwen3-30b-a3b: MaxText's model config sets model.rope_theta=10000000.0 "
                               "where the model card of the zoo preset qwen3_30b_a3b differs; imported as MaxText "
                               "runs it",)
    assert no_mismatch(tree, out, result) == []


def test_model_name_default_generates_the_model_its_sizes_give(tree, imported):
    out, results = imported
    result = results["tiny_mixtral"]
    assert result.failure == "" and result.model == "tiny_mixtral_maxtext"
    model = generated_model(out, "tiny_mixtral_maxtext")
    assert (model.family, model.hidden_size, model.num_layers, model.num_attention_heads, model.num_kv_heads,
            model.head_dim, model.ffn_hidden_size, model.vocab_size, model.rope_theta) == \
        ("mixtral", 64, 2, 4, 2, 16, 128, 256, 1_000_000.0)
    assert (model.moe.num_experts, model.moe.top_k, model.moe.ffn_hidden_size, str(model.moe.load_balancing_type)) \
        == (4, 2, 128, "none")  # base.yml's load_balance_loss_weight: 0.0
    # the backend's own translation of the generated model gives MaxText every architecture key it would run with
    params = load_experiment(result.source, tree, {}).modules[0].params
    exported = model_config(model)
    assert {key: exported[key] for key in MAXTEXT_BASE_ARCHITECTURE if key in exported} == \
        {key: value for key, value in default_architecture(params).items() if key in exported}
    assert no_mismatch(tree, out, result) == []


def test_model_name_default_without_sizes_is_maxtexts_base_model_of_1_1b(imported):
    out, results = imported
    assert results["base_default"].failure == ""
    model = generated_model(out, results["base_default"].model)
    # base.yml: V=32000 untied, h=2048, 16 layers, 16 heads of 128 (MHA), SwiGLU 7168
    h, vocab, layers, ffn = 2048, 32_000, 16, 7168
    by_hand = 2 * vocab * h + layers * (4 * h * h + 3 * h * ffn + 2 * h) + h
    assert model_math.count_parameters(model) == by_hand == 1_104_218_112


def test_a_maxtext_feature_the_canonical_model_lacks_is_one_line(imported):
    _, results = imported
    assert results["capped"].failure == ("model_name=default (model capped.yaml): final_logits_soft_cap=30.0: MaxText "
                                         "features the canonical model (config/schema_model.py) cannot hold")


# MaxText's own model configs (src/maxtext/configs/models/gemma4-*.yml, AI-Hypercomputer/maxtext e591f30): the
# architecture keys of the text model, as MaxText runs model_name=gemma4-31b / gemma4-26b
GEMMA4_31B = {
    "decoder_block": "gemma4", "base_num_decoder_layers": 60, "base_emb_dim": 5376, "base_num_query_heads": 32,
    "base_num_kv_heads": 16, "base_mlp_dim": 21504, "mlp_activations": ["gelu", "linear"], "head_dim": 256,
    "global_head_dim": 512, "global_num_kv_heads": 4, "vocab_size": 262144, "normalization_layer_epsilon": 1e-6,
    "logits_via_embedding": True, "use_post_attn_norm": True, "use_post_ffw_norm": True, "sliding_window_size": 1024,
    "share_kv_projections": True, "v_norm_with_scale": False, "local_rope_max_timescale": 10000,
    "global_rope_max_timescale": 1_000_000, "rope_max_timescale": 1_000_000, "global_rope_proportion": 0.25,
    "local_rope_proportion": 1.0, "final_logits_soft_cap": 30.0,
}
GEMMA4_26B = {
    **GEMMA4_31B, "base_num_decoder_layers": 30, "base_emb_dim": 2816, "base_num_query_heads": 16,
    "base_num_kv_heads": 8, "base_mlp_dim": 2112, "base_moe_mlp_dim": 704, "global_num_kv_heads": 2,
    "num_experts": 128, "num_experts_per_tok": 8, "shared_experts": 1, "norm_topk_prob": True,
    "load_balance_loss_weight": 0.001,
}


@pytest.mark.parametrize("name, maxtext", [("gemma4_26B", GEMMA4_26B), ("gemma4_31B", GEMMA4_31B)])
def test_gemma4_imports_onto_its_zoo_preset_and_translates_back_to_maxtexts_config(tree, imported, name, maxtext):
    out, results = imported
    result = results[name]
    assert (result.failure, result.model) == ("", name.lower())
    assert no_mismatch(tree, out, result) == []
    exported = model_config(zoo_model(name.lower()))
    assert {key: exported[key] for key in maxtext} == maxtext


def test_experts_on_a_dense_maxtext_block_are_one_line(imported):
    """MaxText's qwen3 block has a dense MLP whatever num_experts says: no MoE model is what it would run."""
    _, results = imported
    assert results["dense_block_experts"].failure == (
        "model_name=default (model dense_block_experts.yaml): decoder_block=qwen3, num_experts=4, mlp_activations="
        "['silu', 'linear'], rope_type=default: the canonical model holds MaxText's dense llama2 and qwen3 blocks and "
        "its MoE mixtral block, with SwiGLU (silu, linear) and plain RoPE")
