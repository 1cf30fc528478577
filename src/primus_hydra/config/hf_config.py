"""Hugging Face `config.json` <-> the canonical model schema, both ways, in pure Python (no torch, no transformers).

`read_hf_config` reads a local folder's config.json, `model_fields_from_hf` turns it into the canonical ModelConfig
fields (nested dicts for rope_scaling, moe and mla), `hf_config_for` writes a canonical model back as the config.json
`transformers` 5 loads (`rope_parameters`, `num_local_experts`). Both directions accept only what the native model
computes the same way as `transformers`: anything else (sliding windows, biases on the output projection, another
activation) is one line naming the key. `apply_model_from_hf` gives `model.from_hf=<DIR>` its meaning in every
composed config (config/fast_composition.py calls it after each composition).
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Sequence, Union

from primus_hydra.config.schema_model import (
    GEMMA4_LAYERS_OFF,
    GPT_OSS_LAYERS_OFF,
    GlobalAttentionConfig,
    HybridConfig,
    MLAConfig,
    MoEConfig,
    RopeScalingConfig,
)
from primus_hydra.config.values import override_text, to_plain
from primus_hydra.errors import ConfigValidationError
from primus_hydra.util.omegaconf_text import escape_text

# model_type -> (the canonical family, the class transformers builds for it)
SUPPORTED_MODEL_TYPES = {
    "llama": ("llama", "LlamaForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "qwen3_moe": ("qwen3", "Qwen3MoeForCausalLM"),
    "mixtral": ("mixtral", "MixtralForCausalLM"),
    "deepseek_v2": ("deepseek", "DeepseekV2ForCausalLM"),
    "deepseek_v3": ("deepseek", "DeepseekV3ForCausalLM"),
}
DEEPSEEK_TYPES = ("deepseek_v2", "deepseek_v3")
MOE_TYPES = ("qwen3_moe", "mixtral", *DEEPSEEK_TYPES)
# ModelConfig keys a config.json does not describe: they stay the model preset's (or the command line's)
NOT_IN_HF_CONFIG = ("from_hf", "moe.router_bias_update_rate", "moe.z_loss_coeff", "moe.capacity_factor")
# what no model_type read or written here has: gpt-oss's and Gemma 4's layer features (canonical key -> off value)
WITHOUT_LAYER_FEATURES = {**GPT_OSS_LAYERS_OFF, "full_attention_every": 0, **GEMMA4_LAYERS_OFF}
# keys a config.json carries that are the training's choice: taken from the file unless the command line sets them
TRAINING_KEYS = ("name", "init_std", "moe.aux_loss_coeff", "moe.load_balancing_type")
# a hub id such as meta-llama/Llama-3.1-8B: two names and one slash
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class HFConfigError(ConfigValidationError):
    """A Hugging Face folder or config.json this project cannot use: one line."""

    def __init__(self, line: str):
        super().__init__([line])


def read_hf_config(folder: Union[str, Path], key: str) -> dict:
    """The config.json of the local folder `folder` (given as `key`, e.g. `model.from_hf`), as a dict."""
    path = Path(str(folder)).expanduser()
    if not path.is_dir():
        if not path.exists() and HUB_ID.match(str(folder)) and not str(folder).startswith("."):
            raise HFConfigError(f"{key}={folder}: no such folder, and this machine reaches no model hub: give a local "
                                f"folder that holds config.json (download it elsewhere with "
                                f"`hf download {folder} --local-dir <DIR>`)")
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise HFConfigError(f"{key}={folder}: {what}; give a local Hugging Face folder that holds config.json")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise HFConfigError(f"{key}={folder}: the folder holds no config.json; give a Hugging Face model folder "
                            f"(config.json and *.safetensors, as save_pretrained writes it)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise HFConfigError(f"{key}={folder}: {config_file} is not readable JSON ({reason})") from None
    if not isinstance(config, dict):
        raise HFConfigError(f"{key}={folder}: {config_file} holds a JSON {type(config).__name__}, not an object")
    return config


def model_fields_from_hf(config: dict, where: str) -> dict:
    """The canonical ModelConfig fields `config` (a config.json's dict) describes: every field but NOT_IN_HF_CONFIG
    and the name (the caller's: the folder's), nested dicts for rope_scaling, moe and mla. `where` starts each error
    line (`model.from_hf: DIR/config.json`)."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise HFConfigError(f"{where}: model_type {model_type!r} is not supported; supported: "
                            f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    _refuse_unsupported_features(config, model_type, where)
    read = _Reader(config, where)
    heads = read.integer("num_attention_heads")
    fields = {
        "family": SUPPORTED_MODEL_TYPES[model_type][0],
        "hidden_size": read.integer("hidden_size"),
        "num_layers": read.integer("num_hidden_layers"),
        "num_attention_heads": heads,
        "num_kv_heads": read.integer("num_key_value_heads", heads),
        "head_dim": None if model_type in DEEPSEEK_TYPES else read.optional_integer("head_dim"),
        "ffn_hidden_size": read.integer("intermediate_size"),
        "vocab_size": read.integer("vocab_size"),
        "max_position_embeddings": read.integer("max_position_embeddings"),
        "norm_eps": read.number("rms_norm_eps", 1e-6),
        "tie_embeddings": read.boolean("tie_word_embeddings", False),
        "qkv_bias": model_type == "qwen2",
        "qk_norm": model_type in ("qwen3", "qwen3_moe"),
        "init_std": read.number("initializer_range", 0.02),
    }
    fields["rope_theta"], fields["rope_scaling"] = _rope_from_hf(config, model_type, read)
    fields["moe"] = _moe_from_hf(config, model_type, read)
    fields["mla"] = _mla_from_hf(read) if model_type in DEEPSEEK_TYPES else _defaults(MLAConfig)
    # every family read here is a transformer with RMSNorm and rotary positions (none of a preset's hybrid layers),
    # whole-prefix attention, and none of gpt-oss's layer features
    fields.update(normalization="rmsnorm", position_embedding="rope", hybrid=_defaults(HybridConfig),
                  global_attention=_defaults(GlobalAttentionConfig),
                  **{key: value for key, value in WITHOUT_LAYER_FEATURES.items() if "." not in key})
    return fields


class _Reader:
    """Typed reads of config.json keys, each failure one line naming the key."""

    def __init__(self, config: dict, where: str):
        self.config, self.where = config, where

    def _fail(self, key: str, value: Any, wanted: str) -> HFConfigError:
        return HFConfigError(f"{self.where}: {key}={json.dumps(value)} must be {wanted}")

    def integer(self, key: str, default: Any = dataclasses.MISSING) -> int:
        value = self.config.get(key)
        if value is None:  # transformers reads a null as the key left out (num_key_value_heads: null is MHA)
            value = default
        if value is dataclasses.MISSING:
            raise HFConfigError(f"{self.where}: the key {key} is missing; a Hugging Face config.json of this "
                                f"model_type states it")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._fail(key, value, "an integer >= 0")
        return value

    def optional_integer(self, key: str) -> Any:
        return None if self.config.get(key) is None else self.integer(key)

    def number(self, key: str, default: float) -> float:
        value = self.config.get(key)
        return self.as_number(key, default if value is None else value)

    def as_number(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(key, value, "a number")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.config.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, value, "true or false")
        return value


def _refuse_unsupported_features(config: dict, model_type: str, where: str) -> None:
    """One line for the first thing in `config` the native model does not compute as transformers does."""
    def refuse(key: str, allowed: str) -> None:
        raise HFConfigError(f"{where}: {key}={json.dumps(config.get(key))} is not supported ({model_type}); "
                            f"supported: {allowed}")

    if config.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", '"silu" (SwiGLU)')
    if config.get("use_sliding_window") or (model_type == "mixtral" and config.get("sliding_window") is not None):
        refuse("use_sliding_window" if config.get("use_sliding_window") else "sliding_window",
               "full attention in every layer (no sliding window)")
    if any(kind != "full_attention" for kind in config.get("layer_types") or ()):
        refuse("layer_types", '"full_attention" for every layer')
    if model_type != "qwen2" and config.get("attention_bias"):
        refuse("attention_bias", "false (only qwen2's q/k/v biases are supported)")
    for key, allowed in (("mlp_bias", False), ("partial_rotary_factor", 1.0), ("router_jitter_noise", 0.0),
                         ("quantization_config", None), ("moe_layer_freq", 1), ("decoder_sparse_step", 1)):
        if config.get(key, allowed) not in (allowed, None):
            refuse(key, json.dumps(allowed))
    if model_type == "deepseek_v3" and config.get("scoring_func", "sigmoid") != "sigmoid":
        refuse("scoring_func", '"sigmoid" (deepseek_v3)')
    if model_type == "deepseek_v2" and config.get("scoring_func", "softmax") != "softmax":
        refuse("scoring_func", '"softmax" (deepseek_v2)')
    if model_type == "deepseek_v2" and config.get("topk_method", "greedy") not in ("greedy", "group_limited_greedy"):
        refuse("topk_method", '"greedy" or "group_limited_greedy" (deepseek_v2)')
    dense = config.get("mlp_only_layers") or []
    if model_type == "qwen3_moe" and (not isinstance(dense, list) or dense != list(range(len(dense)))):
        refuse("mlp_only_layers", "the first layers, [0, 1, ..., k-1] (or none)")


ROPE_KEYS = {  # canonical rope_scaling key -> its name in rope_parameters, for each rope type
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"),
}


def _rope_from_hf(config: dict, model_type: str, read: _Reader) -> tuple[float, dict]:
    """(rope_theta, rope_scaling) from transformers 5's `rope_parameters` or 4.x's `rope_theta` and `rope_scaling`."""
    where = read.where
    default_theta = 1e6 if model_type == "mixtral" else 1e4
    parameters = config.get("rope_parameters")
    if parameters is None:
        parameters = dict(config.get("rope_scaling") or {}, rope_theta=config.get("rope_theta", default_theta))
    if not isinstance(parameters, dict) or not {"rope_type", "type", "rope_theta"} & set(parameters):
        raise HFConfigError(f"{where}: rope_parameters={json.dumps(parameters)} is not supported: one rope for "
                            f"every layer ({{rope_theta, rope_type, ...}}) is")
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    scaling = _defaults(RopeScalingConfig)
    if rope_type not in ("default", *ROPE_KEYS):
        raise HFConfigError(f"{where}: rope type {rope_type!r} is not supported; supported: default, "
                            f"{', '.join(ROPE_KEYS)}")
    if parameters.get("attention_factor") is not None:
        raise HFConfigError(f"{where}: rope attention_factor={parameters['attention_factor']} is not supported; "
                            f"the yarn attention factor follows from mscale and mscale_all_dim")
    if rope_type != "default":
        scaling["type"] = rope_type
        if rope_type == "yarn":  # transformers' default when the file leaves it out
            scaling["original_max_position_embeddings"] = config.get("max_position_embeddings")
        for key in ROPE_KEYS[rope_type]:
            if parameters.get(key) is not None:
                scaling[key] = type(scaling[key])(read.as_number(f"rope_parameters.{key}", parameters[key]))
    return read.as_number("rope_parameters.rope_theta", parameters.get("rope_theta", default_theta)), scaling


def _moe_from_hf(config: dict, model_type: str, read: _Reader) -> dict:
    moe = {key: value for key, value in _defaults(MoEConfig).items() if f"moe.{key}" not in NOT_IN_HF_CONFIG}
    if model_type not in MOE_TYPES:
        return moe
    experts_key = next((key for key in ("num_local_experts", "num_experts", "n_routed_experts") if key in config),
                       "num_local_experts")
    moe.update(num_experts=read.integer(experts_key), top_k=read.integer("num_experts_per_tok"),
               router_norm_topk_prob=read.boolean("norm_topk_prob", model_type == "deepseek_v3"),
               aux_loss_coeff=read.number("router_aux_loss_coef", 0.001))
    if model_type == "mixtral":
        moe.update(ffn_hidden_size=read.integer("intermediate_size"), router_norm_topk_prob=True)
    elif model_type == "qwen3_moe":
        moe.update(ffn_hidden_size=read.integer("moe_intermediate_size"),
                   first_dense_layers=len(config.get("mlp_only_layers") or []))
    else:
        groups = model_type == "deepseek_v3" or config.get("topk_method") == "group_limited_greedy"
        moe.update(ffn_hidden_size=read.integer("moe_intermediate_size"),
                   shared_experts=read.optional_integer("n_shared_experts") or 0,
                   first_dense_layers=read.integer("first_k_dense_replace", 0),
                   router_score_function="sigmoid" if model_type == "deepseek_v3" else "softmax",
                   router_topk_scaling_factor=read.number("routed_scaling_factor", 1.0),
                   router_num_groups=(read.optional_integer("n_group") or 1) if groups else 1,
                   router_group_topk=(read.optional_integer("topk_group") or 1) if groups else 1,
                   router_enable_expert_bias=model_type == "deepseek_v3",  # transformers' e_score_correction_bias
                   load_balancing_type="seq_aux_loss" if config.get("seq_aux", True) else "aux_loss",
                   aux_loss_coeff=read.number("aux_loss_alpha", 0.001))
    return moe


def _mla_from_hf(read: _Reader) -> dict:
    return {"enabled": True, "q_lora_rank": read.optional_integer("q_lora_rank"),
            "kv_lora_rank": read.integer("kv_lora_rank"), "qk_rope_head_dim": read.integer("qk_rope_head_dim"),
            "qk_nope_head_dim": read.integer("qk_nope_head_dim"), "v_head_dim": read.integer("v_head_dim")}


def _defaults(schema: type) -> dict:
    """A schema dataclass's defaults as plain values (a Choice as its name)."""
    return {field.name: to_plain(field.default) for field in dataclasses.fields(schema)}


# ---------------------------------------------------------------------------------------------------------------
# canonical model -> config.json


def hf_config_for(model: Any) -> dict:
    """The config.json (transformers 5 spelling) of the canonical `model`: a ModelConfig, its DictConfig, or a dict.
    One line when the model has no Hugging Face counterpart."""
    fields = to_plain(model)
    model_type = hf_model_type(fields)
    _refuse_unexportable(fields, model_type)
    moe, mla = fields["moe"], fields["mla"]
    config = {
        "architectures": [SUPPORTED_MODEL_TYPES[model_type][1]],
        "model_type": model_type,
        "vocab_size": fields["vocab_size"],
        "hidden_size": fields["hidden_size"],
        "intermediate_size": fields["ffn_hidden_size"],
        "num_hidden_layers": fields["num_layers"],
        "num_attention_heads": fields["num_attention_heads"],
        "num_key_value_heads": fields["num_kv_heads"],
        "hidden_act": "silu",
        "max_position_embeddings": fields["max_position_embeddings"],
        "initializer_range": fields["init_std"],
        "rms_norm_eps": fields["norm_eps"],
        "tie_word_embeddings": fields["tie_embeddings"],
        "rope_parameters": _rope_for_hf(fields),
        "attention_dropout": 0.0,
        "use_cache": True,
        # the tokenizer's to say (else transformers' class defaults, e.g. Llama's eos 2, would stop generation)
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    }
    if model_type in DEEPSEEK_TYPES:  # transformers' rotary size of MLA
        config["head_dim"] = mla["qk_rope_head_dim"]
    elif fields["head_dim"] is not None:  # else transformers' default: hidden_size // num_attention_heads
        config["head_dim"] = fields["head_dim"]
    if model_type in ("llama", "qwen3", "qwen3_moe", *DEEPSEEK_TYPES):
        config["attention_bias"] = False
    if model_type == "llama":
        config["mlp_bias"] = False
    if model_type in ("qwen2", "qwen3", "qwen3_moe"):
        config.update(use_sliding_window=False, sliding_window=None)
    if model_type == "mixtral":
        config.update(intermediate_size=moe["ffn_hidden_size"], sliding_window=None, router_jitter_noise=0.0,
                      num_local_experts=moe["num_experts"], num_experts_per_tok=moe["top_k"],
                      router_aux_loss_coef=moe["aux_loss_coeff"])
    if model_type == "qwen3_moe":
        config.update(num_local_experts=moe["num_experts"], num_experts_per_tok=moe["top_k"],
                      moe_intermediate_size=moe["ffn_hidden_size"], norm_topk_prob=moe["router_norm_topk_prob"],
                      router_aux_loss_coef=moe["aux_loss_coeff"], decoder_sparse_step=1,
                      mlp_only_layers=list(range(moe["first_dense_layers"])))
    if model_type in DEEPSEEK_TYPES:
        config.update(_deepseek_keys(model_type, moe, mla))
    return config


def hf_model_type(fields: dict) -> str:
    """The model_type a canonical model (as a dict) exports to, from its family and whether it has experts."""
    family, experts = fields["family"], fields["moe"]["num_experts"] > 0
    moe = fields["moe"]
    if experts and (moe.get("interleave_step", 1) > 1 or moe.get("score_before_experts")):
        raise HFConfigError(f"model.moe.interleave_step={moe.get('interleave_step', 1)}, model.moe.score_before_experts="
                            f"{override_text(bool(moe.get('score_before_experts')))}: Llama 4's routing has no Hugging "
                            f"Face model_type here (transformers' Llama4 also has NoPE layers, chunked attention and no "
                            f"expert bias, which this model lacks or has)")
    if family == "deepseek":
        sigmoid = str(fields["moe"]["router_score_function"]) == "sigmoid"
        return "deepseek_v3" if sigmoid or fields["moe"]["router_enable_expert_bias"] else "deepseek_v2"
    if family == "qwen3":
        return "qwen3_moe" if experts else "qwen3"
    if family in ("llama", "qwen2", "mixtral") and experts == (family == "mixtral"):
        return family
    supported = "llama, qwen2 (dense); mixtral (experts); qwen3, deepseek (either)"
    raise HFConfigError(f"model.family={family} with moe.num_experts={fields['moe']['num_experts']} has no Hugging "
                        f"Face model_type; supported: {supported}")


def _refuse_unexportable(fields: dict, model_type: str) -> None:
    """One line for the first thing the Hugging Face class of `model_type` cannot express."""
    moe = fields["moe"]
    expected = {  # key -> the value the Hugging Face class needs
        "qkv_bias": model_type == "qwen2",
        "qk_norm": model_type in ("qwen3", "qwen3_moe"),
        "mla.enabled": model_type in DEEPSEEK_TYPES,
        **WITHOUT_LAYER_FEATURES,
    }
    if model_type in ("mixtral", "qwen3_moe"):
        expected.update({"moe.shared_experts": 0, "moe.router_score_function": "softmax",
                         "moe.router_topk_scaling_factor": 1.0, "moe.router_num_groups": 1,
                         "moe.router_enable_expert_bias": False})
    if model_type == "mixtral":
        expected.update({"moe.first_dense_layers": 0, "moe.router_norm_topk_prob": True})
    if model_type == "deepseek_v2":
        expected["moe.router_enable_expert_bias"] = False
    if model_type in DEEPSEEK_TYPES and moe["shared_expert_ffn_hidden_size"] is not None:
        expected["moe.shared_expert_ffn_hidden_size"] = moe["shared_experts"] * moe["ffn_hidden_size"]
    for key, needed in expected.items():
        value = _select(fields, key)
        if value != needed:
            raise HFConfigError(f"model.{key}={override_text(value)} cannot be written as Hugging Face {model_type} "
                                f"(model.family={fields['family']}), which needs {override_text(needed)}")


def _deepseek_keys(model_type: str, moe: dict, mla: dict) -> dict:
    grouped = moe["router_num_groups"] > 1
    keys = {
        "n_routed_experts": moe["num_experts"], "num_experts_per_tok": moe["top_k"],
        "moe_intermediate_size": moe["ffn_hidden_size"], "n_shared_experts": moe["shared_experts"],
        "first_k_dense_replace": moe["first_dense_layers"], "routed_scaling_factor": moe["router_topk_scaling_factor"],
        "norm_topk_prob": moe["router_norm_topk_prob"],
        "n_group": moe["router_num_groups"], "topk_group": moe["router_group_topk"],
        "q_lora_rank": mla["q_lora_rank"], "kv_lora_rank": mla["kv_lora_rank"],
        "qk_rope_head_dim": mla["qk_rope_head_dim"], "qk_nope_head_dim": mla["qk_nope_head_dim"],
        "v_head_dim": mla["v_head_dim"], "qk_head_dim": mla["qk_rope_head_dim"] + mla["qk_nope_head_dim"],
        # the keys of DeepSeek's own config.json, which inference engines read
        "scoring_func": "sigmoid" if model_type == "deepseek_v3" else "softmax",
        "seq_aux": str(moe["load_balancing_type"]) == "seq_aux_loss", "aux_loss_alpha": moe["aux_loss_coeff"],
        "moe_layer_freq": 1,
    }
    if model_type == "deepseek_v3":
        keys.update(topk_method="noaux_tc", rope_interleave=True, num_nextn_predict_layers=0)
    else:
        keys["topk_method"] = "group_limited_greedy" if grouped else "greedy"
        if not grouped:
            keys.update(n_group=None, topk_group=None)
    return keys


def _rope_for_hf(fields: dict) -> dict:
    scaling = fields["rope_scaling"]
    rope_type = str(scaling["type"])
    parameters = {"rope_theta": float(fields["rope_theta"]), "rope_type": "default" if rope_type == "none" else rope_type}
    for key in ROPE_KEYS.get(rope_type, ()):
        parameters[key] = scaling[key]
    return parameters


def _select(tree: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree[part]
    return tree


# ---------------------------------------------------------------------------------------------------------------
# model.from_hf=<DIR> in a composed config


def apply_model_from_hf(cfg: Any, overrides: Sequence[str]) -> None:
    """When `cfg.model.from_hf` names a folder, its config.json replaces the model preset's architecture in `cfg`
    (in place): every field the file describes, model.name the folder's name. A model key of the command line
    (`overrides`) that disagrees with the file is one line; the training keys it sets (TRAINING_KEYS) stay."""
    from omegaconf import DictConfig, OmegaConf

    folder = OmegaConf.select(cfg, "model.from_hf", default=None)
    if folder is None:
        return
    config = read_hf_config(folder, "model.from_hf")
    config_file = Path(str(folder)).expanduser().resolve() / "config.json"
    fields = _flat(model_fields_from_hf(config, f"model.from_hf: {config_file}"))
    fields["name"] = escape_text(config_file.parent.name)  # a folder named `${...}` stays a name
    given = set()
    for key in _command_line_model_keys(overrides):
        value = OmegaConf.select(cfg.model, key, default=None)
        given |= {f"{key}.{leaf}" for leaf in _flat(OmegaConf.to_container(value))} \
            if isinstance(value, DictConfig) else {key}
    for key in sorted(given & set(fields) - set(TRAINING_KEYS)):
        value = OmegaConf.select(cfg.model, key)
        if not _same(value, fields[key]):
            raise HFConfigError(f"model.{key}={override_text(value)} (command line) disagrees with {config_file}, which "
                                f"gives {override_text(fields[key])}: leave model.{key} out, or use another folder")
    for key, value in fields.items():
        if key not in given:
            OmegaConf.update(cfg.model, key, value, merge=False)
    cfg.model.from_hf = str(config_file.parent)


def _command_line_model_keys(overrides: Sequence[str]) -> list[str]:
    """The keys under model. that `overrides` set (`model.hidden_size=64`, `+model.x=1`), relative to model."""
    keys = []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key.startswith("model.") and "@" not in key and "=" in override:
            keys.append(key[len("model."):])
    return keys


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _same(value: Any, expected: Any) -> bool:
    numbers = (int, float)
    if isinstance(value, numbers) and isinstance(expected, numbers) \
            and not isinstance(value, bool) and not isinstance(expected, bool):
        return float(value) == float(expected)
    return to_plain(value) == to_plain(expected)
