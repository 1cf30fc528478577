"""Hugging Face config.json <-> the canonical model (config/hf_config.py), and `model.from_hf=<DIR>` in a composed
config. The config.json files are written by `transformers` itself (`<Config>(...).save_pretrained`); nothing is
downloaded."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import primus_hydra
from helpers.compose import CONF_DIR
from helpers.hf_models import needs_transformers
from primus_hydra.config.hf_config import (
    NOT_IN_HF_CONFIG,
    SUPPORTED_MODEL_TYPES,
    HFConfigError,
    hf_config_for,
    model_fields_from_hf,
    read_hf_config,
)
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.errors import ConfigValidationError

SMALL = dict(vocab_size=256, hidden_size=64, num_attention_heads=4, num_hidden_layers=3, max_position_embeddings=512,
             intermediate_size=96)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, num_key_value_heads=4)
EXPERTS = dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2)
TINY = {  # name -> (transformers config class, its arguments)
    "llama": ("LlamaConfig", dict(num_key_value_heads=2)),
    "llama3.1_tied": ("LlamaConfig", dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
                                          rope_theta=500000.0, rope_scaling={
                                              "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 128})),
    "llama_linear": ("LlamaConfig", dict(rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "qwen2": ("Qwen2Config", dict(num_key_value_heads=2, rope_theta=1e6)),
    "qwen3": ("Qwen3Config", dict(num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, num_experts=8,
                                         num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[0],
                                         router_aux_loss_coef=0.002)),
    "mixtral": ("MixtralConfig", dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    "deepseek_v2_lite": ("DeepseekV2Config", dict(**MLA, **EXPERTS, q_lora_rank=None, n_shared_experts=2,
                                                  first_k_dense_replace=1, topk_method="greedy")),
    "deepseek_v2_grouped": ("DeepseekV2Config", dict(**MLA, **EXPERTS, q_lora_rank=24, n_shared_experts=1,
                                                     topk_method="group_limited_greedy", n_group=4, topk_group=2,
                                                     routed_scaling_factor=16.0)),
    "deepseek_v3": ("DeepseekV3Config", dict(**MLA, **EXPERTS, q_lora_rank=32, n_shared_experts=1, n_group=2,
                                             topk_group=1, routed_scaling_factor=2.5, first_k_dense_replace=1,
                                             rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                           "original_max_position_embeddings": 128, "beta_fast": 32.0,
                                                           "beta_slow": 1.0, "mscale": 0.707,
                                                           "mscale_all_dim": 0.707})),
}
# the attributes of a transformers config that decide what the model computes
ARCHITECTURE = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
                "tie_word_embeddings", "hidden_act", "attention_bias", "mlp_bias", "initializer_range",
                "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                "router_aux_loss_coef", "mlp_only_layers", "decoder_sparse_step", "n_shared_experts",
                "first_k_dense_replace", "routed_scaling_factor", "n_group", "topk_group", "topk_method",
                "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "rope_interleave",
                "use_sliding_window", "sliding_window")


def save_tiny_config(name: str, folder: Path) -> Path:
    """The config.json transformers writes for the tiny model `name` (TINY), in `folder`."""
    import transformers

    class_name, arguments = TINY[name]
    getattr(transformers, class_name)(**{**SMALL, **arguments}).save_pretrained(folder)
    return folder


def rope(config) -> dict:
    return {key: value for key, value in config.rope_parameters.items() if key != "type"}  # 4.x's second spelling


@needs_transformers
@pytest.mark.parametrize("name", TINY)
def test_a_transformers_config_comes_back_from_the_canonical_model_as_the_same_architecture(tmp_path, name):
    import torch
    import transformers

    original = transformers.AutoConfig.from_pretrained(save_tiny_config(name, tmp_path / "hf"))
    fields = model_fields_from_hf(read_hf_config(tmp_path / "hf", "model.from_hf"), "model.from_hf")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.json").write_text(json.dumps(hf_config_for(fields)))
    exported = transformers.AutoConfig.from_pretrained(tmp_path / "out")

    assert type(exported) is type(original)
    assert exported.architectures == [SUPPORTED_MODEL_TYPES[original.model_type][1]]
    described = [key for key in ARCHITECTURE if hasattr(original, key)]
    assert {key: getattr(exported, key) for key in described} == {key: getattr(original, key) for key in described}
    assert rope(exported) == rope(original)
    with torch.device("meta"):
        models = [transformers.AutoModelForCausalLM.from_config(config) for config in (original, exported)]
    shapes = [{key: tuple(value.shape) for key, value in model.state_dict().items()} for model in models]
    assert shapes[0] == shapes[1]
    assert type(models[1]).__name__ == exported.architectures[0]


@needs_transformers
@pytest.mark.parametrize("name", TINY)
def test_the_canonical_fields_survive_a_trip_through_config_json(tmp_path, name):
    fields = model_fields_from_hf(read_hf_config(save_tiny_config(name, tmp_path), "k"), "k")

    assert model_fields_from_hf(hf_config_for(fields), "k") == fields


def canonical_fields(model) -> dict:
    """A preset's fields as model_fields_from_hf gives them: without the keys no config.json holds and the name,
    head_dim stated, and without ffn_hidden_size where every layer is MoE (no dense FFN to size)."""
    fields = OmegaConf.to_container(model, enum_to_str=True)
    for key in (*NOT_IN_HF_CONFIG, "name"):
        container, _, leaf = key.rpartition(".")
        (fields[container] if container else fields).pop(leaf)
    if fields["family"] == "deepseek":
        fields["head_dim"] = None
    if fields["moe"]["num_experts"] and not fields["moe"]["first_dense_layers"]:
        fields.pop("ffn_hidden_size")
    return fields


PRESETS = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml"))


def preset(name: str, *changes: dict):
    """conf/model/<name>.yaml over the schema's defaults, as composing `model=<name>` gives it."""
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"),
                           *changes)


@pytest.mark.parametrize("name", PRESETS)
def test_every_model_preset_is_written_as_a_config_json_that_reads_back_the_same(name):
    model = preset(name)
    if model.family == "llama4":  # torchtitan's llama4 flavors: no Hugging Face model_type holds them
        with pytest.raises(HFConfigError, match=r"^model.moe.interleave_step=\d, model.moe.score_before_experts=true: "
                                                r"Llama 4's routing has no Hugging Face model_type here"):
            hf_config_for(model)
        return
    # Bridge's Mamba-2 and Primus's Zebra-Llama (megatron-core's only), Gemma 4 (transformers' Gemma4 is not
    # among the model_types converted here)
    if model.hybrid.layer_pattern is not None or model.family == "gemma4":
        with pytest.raises(HFConfigError, match=rf"^model.family={model.family} with moe.num_experts=\d+ has no Hugging "
                                                r"Face model_type; supported: "):
            hf_config_for(model)
        return
    if model.family == "gpt_oss":  # transformers' GptOss is not among the model_types converted here
        with pytest.raises(HFConfigError, match=r"^model.family=gpt_oss with moe.num_experts=\d+ has no Hugging Face "
                                                r"model_type; supported: "):
            hf_config_for(model)
        return
    hf_config = hf_config_for(model)
    fields = model_fields_from_hf(hf_config, name)
    expected = canonical_fields(model)
    if "ffn_hidden_size" not in expected:
        fields.pop("ffn_hidden_size")

    assert SUPPORTED_MODEL_TYPES[hf_config["model_type"]][0] == model.family
    assert fields == expected


def test_deepseek_v3_exports_sigmoid_routing_with_its_bias_and_deepseek_v2_softmax():
    v3, v2 = hf_config_for(preset("deepseek_v3")), hf_config_for(preset("deepseek_v2_lite"))

    assert (v3["model_type"], v3["architectures"], v3["n_group"], v3["topk_group"], v3["routed_scaling_factor"]) == \
        ("deepseek_v3", ["DeepseekV3ForCausalLM"], 8, 4, 2.5)
    assert (v2["model_type"], v2["topk_method"], v2["q_lora_rank"], v2["n_shared_experts"]) == \
        ("deepseek_v2", "greedy", None, 2)
    assert v3["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 40.0,
                                     "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                                     "mscale": 1.0, "mscale_all_dim": 1.0}


def test_a_model_dataclass_exports_as_its_config_does():
    model = ModelConfig(name="m", family="qwen3", hidden_size=64, num_layers=2, num_attention_heads=4, num_kv_heads=2,
                        ffn_hidden_size=128, vocab_size=256, max_position_embeddings=128, qk_norm=True)

    assert hf_config_for(model) == hf_config_for(OmegaConf.structured(model))
    assert (hf_config_for(model)["model_type"], "head_dim" in hf_config_for(model)) == ("qwen3", False)


def transformers_4_spelling(config: dict) -> dict:
    """`config` as transformers 4.x wrote it: rope_theta and rope_scaling, num_experts for qwen3_moe."""
    old = dict(config)
    rope_parameters = dict(old.pop("rope_parameters"))
    old["rope_theta"] = rope_parameters.pop("rope_theta")
    rope_type = rope_parameters.pop("rope_type")
    old["rope_scaling"] = None if rope_type == "default" else {"type": rope_type, **rope_parameters}
    if old["model_type"] == "qwen3_moe":
        old["num_experts"] = old.pop("num_local_experts")
    return old


@pytest.mark.parametrize("name", ["llama3.1_8b", "deepseek_v3", "mixtral_8x7b", "qwen3_8b"])
def test_the_transformers_4_spelling_reads_as_the_transformers_5_one(name):
    config = hf_config_for(preset(name))

    assert model_fields_from_hf(transformers_4_spelling(config), "k") == model_fields_from_hf(config, "k")


def test_qwen3_moe_of_transformers_4_reads_its_num_experts():
    config = {**hf_config_for(preset("qwen3_8b")), "model_type": "qwen3_moe",
              "num_local_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 64, "norm_topk_prob": True}
    moe = model_fields_from_hf(transformers_4_spelling(config), "k")["moe"]

    assert (moe["num_experts"], moe["top_k"], moe["ffn_hidden_size"], moe["router_norm_topk_prob"]) == (16, 4, 64, True)


LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 1024,
         "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}


@pytest.mark.parametrize("change, expected", [
    ({"model_type": "gpt2"}, "k: model_type 'gpt2' is not supported; supported: llama, qwen2, qwen3, qwen3_moe, "
                             "mixtral, deepseek_v2, deepseek_v3"),
    ({"model_type": ["llama"]}, "k: model_type ['llama'] is not supported; supported: llama, "),
    ({"model_type": "qwen3_moe", "mlp_only_layers": [1], "num_local_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32}, "k: mlp_only_layers=[1] is not supported (qwen3_moe); supported: the first layers"),
    ({"hidden_act": "gelu"}, 'k: hidden_act="gelu" is not supported (llama); supported: "silu" (SwiGLU)'),
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 64},
     "k: use_sliding_window=true is not supported (qwen2); supported: full attention in every layer"),
    ({"model_type": "mixtral", "sliding_window": 4096, "num_local_experts": 8, "num_experts_per_tok": 2},
     "k: sliding_window=4096 is not supported (mixtral)"),
    ({"attention_bias": True}, "k: attention_bias=true is not supported (llama)"),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "dynamic", "factor": 2.0}},
     "k: rope type 'dynamic' is not supported; supported: default, linear, llama3, yarn"),
    ({"quantization_config": {"quant_method": "fp8"}}, 'k: quantization_config={"quant_method": "fp8"} is not supported'),
    ({"hidden_size": "64"}, 'k: hidden_size="64" must be an integer >= 0'),
    ({"num_hidden_layers": -1}, "k: num_hidden_layers=-1 must be an integer >= 0"),
    ({"rope_parameters": {"rope_theta": "big", "rope_type": "default"}},
     'k: rope_parameters.rope_theta="big" must be a number'),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "linear", "factor": [2]}},
     "k: rope_parameters.factor=[2] must be a number"),
])
def test_what_the_native_model_does_not_compute_is_one_line(change, expected):
    with pytest.raises(ConfigValidationError) as error:
        model_fields_from_hf({**LLAMA, **change}, "k")

    assert len(error.value.failures) == 1 and error.value.failures[0].startswith(expected), error.value.failures


@pytest.mark.parametrize("missing", [None, "left out"])
def test_a_missing_key_is_one_line_naming_it(missing):
    config = {**LLAMA, "vocab_size": None}
    if missing == "left out":
        del config["vocab_size"]
    with pytest.raises(ConfigValidationError, match=r"^k: the key vocab_size is missing"):
        model_fields_from_hf(config, "k")


def test_no_num_key_value_heads_means_one_per_query_head_as_in_transformers():
    assert model_fields_from_hf({**LLAMA, "num_key_value_heads": None}, "k")["num_kv_heads"] == 4


@pytest.mark.parametrize("name, change, expected", [
    ("llama_tiny", {"moe": {"num_experts": 8, "ffn_hidden_size": 64}},
     "model.family=llama with moe.num_experts=8 has no Hugging Face model_type; supported: "),
    ("qwen2.5_7b", {"qkv_bias": False}, "model.qkv_bias=false cannot be written as Hugging Face qwen2 "
                                        "(model.family=qwen2), which needs true"),
    ("moe_tiny", {"moe": {"shared_experts": 1}}, "model.moe.shared_experts=1 cannot be written as Hugging Face mixtral"),
    ("llama_tiny", {"mla": {"enabled": True}}, "model.mla.enabled=true cannot be written as Hugging Face llama"),
])
def test_a_model_without_a_hugging_face_counterpart_is_one_line(name, change, expected):
    model = preset(name, change)
    with pytest.raises(ConfigValidationError) as error:
        hf_config_for(model)

    assert len(error.value.failures) == 1 and error.value.failures[0].startswith(expected), error.value.failures


def test_read_hf_config_refuses_what_is_not_a_local_model_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "llama",')
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "config.json").write_text("[1]")
    cases = {
        "meta-llama/Llama-3.1-8B": "k=meta-llama/Llama-3.1-8B: no such folder, and this machine reaches no model hub",
        str(tmp_path / "nowhere"): f"k={tmp_path / 'nowhere'}: does not exist",
        str(tmp_path / "empty"): f"k={tmp_path / 'empty'}: the folder holds no config.json",
        str(tmp_path / "broken"): f"k={tmp_path / 'broken'}: {tmp_path / 'broken' / 'config.json'} is not readable JSON",
        str(tmp_path / "list" / "config.json"): f"k={tmp_path / 'list' / 'config.json'}: is a file, not a folder",
        str(tmp_path / "list"): f"k={tmp_path / 'list'}: {tmp_path / 'list' / 'config.json'} holds a JSON list",
    }
    for folder, expected in cases.items():
        with pytest.raises(ConfigValidationError) as error:
            read_hf_config(folder, "k")
        assert len(error.value.failures) == 1 and "\n" not in error.value.failures[0]
        assert error.value.failures[0].startswith(expected), error.value.failures


# --- model.from_hf in a composed config


@needs_transformers
def test_from_hf_replaces_the_presets_architecture_and_names_the_model_after_the_folder(tmp_path):
    folder = save_tiny_config("deepseek_v3", tmp_path / "tiny-dsv3")
    model = primus_hydra.compose(["model=llama3.1_8b", f"model.from_hf={folder}"], validate=False).model
    expected = model_fields_from_hf(read_hf_config(folder, "k"), "k")

    assert (model.name, model.from_hf) == ("tiny-dsv3", str(folder))
    assert canonical_fields(model) == expected


def test_from_hf_keeps_the_keys_no_config_json_holds_from_the_preset(tmp_path):
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA))
    model = primus_hydra.compose(["model=deepseek_v3", f"model.from_hf={tmp_path / 'llama'}"], validate=False).model

    assert (model.moe.num_experts, model.moe.router_bias_update_rate, model.mla.enabled) == (0, 0.001, False)
    assert (model.rope_scaling.type, model.rope_scaling.factor) == ("none", 1.0)


def test_from_hf_takes_command_line_keys_that_agree_and_the_trainings_own(tmp_path):
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA))
    model = primus_hydra.compose([f"model.from_hf={tmp_path / 'llama'}", "model.hidden_size=64", "model.rope_theta=1e4",
                                  "model.init_std=0.01", "model.name=mine", "model.moe.aux_loss_coeff=0.1"]).model

    assert (model.hidden_size, model.init_std, model.name, model.moe.aux_loss_coeff) == (64, 0.01, "mine", 0.1)


@pytest.mark.parametrize("override, expected", [
    ("model.hidden_size=128", "model.hidden_size=128 (command line) disagrees with {file}, which gives 64: leave "
                              "model.hidden_size out, or use another folder"),
    ("model.rope_scaling.type=llama3", "model.rope_scaling.type=llama3 (command line) disagrees with {file}, which "
                                       "gives none"),
    ("model.moe={num_experts:8}", "model.moe.num_experts=8 (command line) disagrees with {file}, which gives 0"),
])
def test_from_hf_refuses_a_command_line_key_that_disagrees_with_the_file(tmp_path, override, expected):
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA))
    with pytest.raises(ConfigValidationError) as error:
        primus_hydra.compose([f"model.from_hf={tmp_path / 'llama'}", override])

    expected = expected.format(file=tmp_path / "llama" / "config.json")
    assert len(error.value.failures) == 1 and error.value.failures[0].startswith(expected), error.value.failures
