"""The model of an imported experiment.

The zoo preset (conf/model/) whose architecture numbers, as this project's own translation writes them for the
backend, all equal those of the Primus model preset is used as it is; else the closest zoo preset of the same kind
(dense/MoE, standard/latent attention) with the differing numbers written over it, as a generated model file. The
translation is the oracle: there is no second table of what a zoo preset means in Megatron's names. Architecture
numbers that the experiment's own `overrides` change (Primus lets them) become `model.*` keys of the experiment.

Megatron derives some arguments when they are null (kv_channels, ffn_hidden_size, ...): both sides are compared
after the same derivations (megatron_architecture).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from primus_hydra.backends.architecture_support import gemma4_features, gpt_oss_features
from primus_hydra.backends.megatron.args import mla_args, model_args, moe_args
from primus_hydra.backends.megatron.hybrid_args import architecture_variant_args
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.config.values import PlainTree, set_value, value_set
from primus_hydra.migrate.hybrid_layers import hybrid_pattern, spec_mixer, uses_primus_hybrid_stack
from primus_hydra.migrate.primus_yaml import plain

# the Megatron arguments that decide a model's architecture
MEGATRON_ARCHITECTURE = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "rotary_base", "norm_epsilon", "add_qkv_bias", "qk_layernorm", "untie_embeddings_and_output_weights",
    "swiglu", "normalization", "position_embedding_type", "use_rope_scaling", "rope_scaling_factor", "rope_type",
    "rotary_scaling_factor", "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
    "qk_pos_emb_head_dim", "v_head_dim", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_router_score_function", "moe_router_pre_softmax",
    "moe_router_topk_scaling_factor", "moe_router_num_groups", "moe_router_group_topk",
    "moe_router_enable_expert_bias", "moe_apply_probs_on_input", "hybrid_override_pattern", "mamba_state_dim", "mamba_head_dim",
    "mamba_num_groups", "mamba_num_heads", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
    "linear_num_key_heads", "linear_num_value_heads", "is_hybrid_model", "hybrid_attention_ratio", "hybrid_mlp_ratio",
    "model_type", "spec", "mamba_expand", "mamba_d_conv")
HYBRID_SIZES = MEGATRON_ARCHITECTURE[MEGATRON_ARCHITECTURE.index("mamba_state_dim"):
                                     MEGATRON_ARCHITECTURE.index("is_hybrid_model")]
# what Primus says of a hybrid model beyond the pattern and sizes: read into the layer pattern and the mixer, and
# compared through them (Megatron-LM gets the pattern, its ratios 0, no Primus layer spec)
READ_INTO_PATTERN = MEGATRON_ARCHITECTURE[MEGATRON_ARCHITECTURE.index("is_hybrid_model"):]
# megatron-core's TransformerConfig defaults of the hybrid sizes (mamba_num_heads null: derived from the width)
HYBRID_DEFAULTS = {"mamba_state_dim": 128, "mamba_head_dim": 64, "mamba_num_groups": 8, "linear_conv_kernel_dim": 4,
                   "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                   "linear_num_value_heads": 32}
# Megatron-LM's argparse defaults, what runs where a preset leaves these out (a Primus model preset that names its
# parent under `bases:` instead of `extends:` inherits nothing from it)
MEGATRON_LM_DEFAULTS = {"normalization": "LayerNorm", "position_embedding_type": "learned_absolute",
                        "untie_embeddings_and_output_weights": False}
# megatron-core's MambaMixer builds expand=2 and a convolution of width 4 whatever these say
FIXED_MAMBA_ARGS = {"mamba_expand": 2, "mamba_d_conv": 4}
# what decides which zoo presets may be a base at all
STRUCTURE = ("multi_latent_attention", "num_experts", "swiglu", "normalization", "position_embedding_type")


def _first_dense(freq: Any) -> Optional[int]:
    match = re.fullmatch(r"\(\[0\]\*(\d+)\+\[1\]\*(\d+)\)", str(freq).replace(" ", ""))
    if match:
        return int(match.group(1))
    return 0 if str(freq) == "1" else None


# Megatron argument -> (model field, value as the model field holds it); absent: no model field holds it
MODEL_FIELDS: dict[str, tuple[str, Callable[[Any, dict], Any]]] = {
    "num_layers": ("num_layers", lambda v, a: v),
    "hidden_size": ("hidden_size", lambda v, a: v),
    "ffn_hidden_size": ("ffn_hidden_size", lambda v, a: v),
    "num_attention_heads": ("num_attention_heads", lambda v, a: v),
    "num_query_groups": ("num_kv_heads", lambda v, a: v),
    "kv_channels": ("head_dim", lambda v, a: v),
    "rotary_base": ("rope_theta", lambda v, a: float(v)),
    "norm_epsilon": ("norm_eps", lambda v, a: float(v)),
    "add_qkv_bias": ("qkv_bias", lambda v, a: bool(v)),
    "qk_layernorm": ("qk_norm", lambda v, a: bool(v) and not a.get("multi_latent_attention")),
    "untie_embeddings_and_output_weights": ("tie_embeddings", lambda v, a: not v),
    "use_rope_scaling": ("rope_scaling.type", lambda v, a: "llama3" if v else "none"),
    "rope_scaling_factor": ("rope_scaling.factor", lambda v, a: float(v)),
    "rope_type": ("rope_scaling.type", lambda v, a: "yarn" if v == "yarn" else "none"),
    "rotary_scaling_factor": ("rope_scaling.factor", lambda v, a: float(v)),
    "multi_latent_attention": ("mla.enabled", lambda v, a: bool(v)),
    "q_lora_rank": ("mla.q_lora_rank", lambda v, a: v),
    "kv_lora_rank": ("mla.kv_lora_rank", lambda v, a: v),
    "qk_head_dim": ("mla.qk_nope_head_dim", lambda v, a: v),
    "qk_pos_emb_head_dim": ("mla.qk_rope_head_dim", lambda v, a: v),
    "v_head_dim": ("mla.v_head_dim", lambda v, a: v),
    "num_experts": ("moe.num_experts", lambda v, a: v or 0),
    "moe_router_topk": ("moe.top_k", lambda v, a: v),
    "moe_ffn_hidden_size": ("moe.ffn_hidden_size", lambda v, a: v),
    "moe_shared_expert_intermediate_size": ("moe.shared_expert_ffn_hidden_size", lambda v, a: v),
    "moe_layer_freq": ("moe.first_dense_layers", lambda v, a: v),  # megatron_architecture made it a count
    "moe_router_score_function": ("moe.router_score_function", lambda v, a: v),
    "moe_apply_probs_on_input": ("moe.score_before_experts", lambda v, a: bool(v)),
    "moe_router_pre_softmax": ("moe.router_norm_topk_prob", lambda v, a: not v),
    "moe_router_topk_scaling_factor": ("moe.router_topk_scaling_factor", lambda v, a: float(v)),
    "moe_router_num_groups": ("moe.router_num_groups", lambda v, a: v or 1),
    "moe_router_group_topk": ("moe.router_group_topk", lambda v, a: v or 1),
    "moe_router_enable_expert_bias": ("moe.router_enable_expert_bias", lambda v, a: bool(v)),
    "normalization": ("normalization", lambda v, a: {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}.get(v, v)),
    "position_embedding_type": ("position_embedding", lambda v, a: v),
    "hybrid_override_pattern": ("hybrid.layer_pattern", lambda v, a: v),
    **{key: (f"hybrid.{key}", lambda v, a: v) for key in HYBRID_SIZES},
    # the model's training choices and YaRN's details: set in the experiment, not used to pick the zoo preset
    "moe_router_load_balancing_type": ("moe.load_balancing_type", lambda v, a: v),
    "moe_aux_loss_coeff": ("moe.aux_loss_coeff", lambda v, a: float(v)),
    "moe_z_loss_coeff": ("moe.z_loss_coeff", lambda v, a: float(v or 0.0)),
    "moe_router_bias_update_rate": ("moe.router_bias_update_rate", lambda v, a: float(v)),
    "moe_expert_capacity_factor": ("moe.capacity_factor", lambda v, a: v),
    "mscale": ("rope_scaling.mscale", lambda v, a: float(v)),
    "mscale_all_dim": ("rope_scaling.mscale_all_dim", lambda v, a: float(v)),
    "init_method_std": ("init_std", lambda v, a: float(v)),
}
TRAINING_CHOICES = ("moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff",
                    "moe_router_bias_update_rate", "moe_expert_capacity_factor", "mscale", "mscale_all_dim",
                    "init_method_std")


@dataclass
class ModelChoice:
    zoo: str  # the zoo preset used as it is, or the base of the generated file
    generated: dict = field(default_factory=dict)  # model fields the generated file writes over the base
    name: str = ""  # the generated preset's name (empty: the zoo preset)
    experiment: dict = field(default_factory=dict)  # model fields the experiment's overrides change
    unrepresentable: list[str] = field(default_factory=list)  # "key=value" no model field can hold

    @property
    def preset(self) -> str:
        return self.name or self.zoo


def normalized(value: Any) -> Any:
    value = plain(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        return text
    return getattr(value, "value", value)


def same_normalized(a: Any, b: Any) -> bool:
    """Equal once normalized (1 and 1.0 and "1" alike), numbers within a relative 1e-12."""
    a, b = normalized(a), normalized(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))
    return a == b


def megatron_architecture(args: dict) -> dict:
    """The architecture arguments, with what Megatron derives from null or switched-off ones filled in."""
    arch = {key: normalized(args.get(key)) for key in MEGATRON_ARCHITECTURE + TRAINING_CHOICES}
    h, heads = arch["hidden_size"], arch["num_attention_heads"]
    if arch["ffn_hidden_size"] is None and h:
        arch["ffn_hidden_size"] = int(4 * h * 2 / 3 / 64) * 64 if arch["swiglu"] else 4 * h
    if not args.get("group_query_attention") or arch["num_query_groups"] is None:
        arch["num_query_groups"] = heads
    if arch["kv_channels"] is None and h and heads:
        arch["kv_channels"] = h // heads
    if not arch["num_experts"]:
        for key in [k for k in arch if k.startswith("moe_")]:
            arch[key] = None
        arch["num_experts"] = None
    else:
        arch["moe_apply_probs_on_input"] = bool(arch["moe_apply_probs_on_input"])  # Megatron-LM's default: off
        if arch["moe_z_loss_coeff"] is None:
            arch["moe_z_loss_coeff"] = 0
    if arch["rope_type"] != "yarn" and not arch["multi_latent_attention"]:
        arch["mscale"] = arch["mscale_all_dim"] = None
    elif arch["moe_ffn_hidden_size"] is None:
        arch["moe_ffn_hidden_size"] = arch["ffn_hidden_size"]
    if not arch["use_rope_scaling"]:
        arch["use_rope_scaling"], arch["rope_scaling_factor"] = False, None
    if arch["multi_latent_attention"] and arch["rope_type"] is None:  # megatron-core's MLA default
        arch["rope_type"] = "yarn"
        arch["rotary_scaling_factor"] = arch["rotary_scaling_factor"] or 40
    if arch["rope_type"] != "yarn":
        arch["rope_type"], arch["rotary_scaling_factor"] = None, None
    if not arch["multi_latent_attention"]:
        for key in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            arch[key] = None
        arch["multi_latent_attention"] = False
    freq = arch["moe_layer_freq"]
    arch["moe_layer_freq"] = _first_dense(1 if freq is None else freq) if arch["num_experts"] else None
    _hybrid_architecture(args, arch)
    return arch


def _hybrid_architecture(args: dict, arch: dict) -> None:
    """The layer pattern (derived from the ratios when not given) and the sizes of a hybrid model; none of them for a
    GPT model, and no MLP numbers for a hybrid without MLP layers."""
    pattern = hybrid_pattern(args)
    arch["hybrid_override_pattern"] = pattern
    for key in READ_INTO_PATTERN:
        arch[key] = None
    if pattern is None:
        for key in HYBRID_SIZES:
            arch[key] = None
        return
    for key, value in HYBRID_DEFAULTS.items():
        arch[key] = value if arch[key] is None else arch[key]
    if not set(pattern) & set("-E"):
        arch["swiglu"] = arch["ffn_hidden_size"] = None
    if arch["multi_latent_attention"] and uses_primus_hybrid_stack(args):  # its MLA spec always norms the latents
        arch["qk_layernorm"] = True


@lru_cache(maxsize=None)
def zoo_models() -> dict[str, DictConfig]:
    """Every conf/model preset, typed as a composed config holds it."""
    schema = OmegaConf.structured(ModelConfig)
    folder = Path(find_conf_dir()) / "model"
    return {path.stem: OmegaConf.merge(schema, OmegaConf.load(path)) for path in sorted(folder.glob("*.yaml"))}


def _megatron_translation(model: DictConfig) -> dict:
    defaults = {"swiglu": True}
    return megatron_architecture({**defaults, **model_args(model), **moe_args(model), **mla_args(model),
                                  **architecture_variant_args(model)})


@lru_cache(maxsize=None)
def _megatron_zoo() -> dict[str, dict]:
    """The translation of each zoo preset a Megatron model may be generated over: not one with a layer pattern
    Megatron imports do not read back, or with gpt-oss's or Gemma 4's layers, which megatron does not build."""
    return {name: _megatron_translation(model) for name, model in zoo_models().items()
            if model.moe.interleave_step == 1 and not gpt_oss_features(model) and not gemma4_features(model)}


def stem(name: Any) -> str:
    return re.sub(r"[^a-z0-9._]", "_", str(plain(name)).lower().removesuffix(".yaml"))


def megatron_model(preset_args: dict, run_args: dict, preset_name: str) -> ModelChoice:
    """preset_args: the module and model presets as Primus merges them; run_args: with the overrides on top."""
    wanted = megatron_architecture(with_megatron_lm_defaults(preset_args))
    candidates = []
    for name, ours in _megatron_zoo().items():
        structure = sum(bool(wanted[key]) != bool(ours[key]) if key == "num_experts" else wanted[key] != ours[key]
                        for key in STRUCTURE)
        differ = [key for key in MEGATRON_ARCHITECTURE if wanted[key] != ours[key]]
        candidates.append((structure, len(differ), stem(name) != stem(preset_name), name, differ))
    candidates.sort(key=lambda item: item[:4])
    best = candidates[0][3]
    choice = ModelChoice(best)
    choice.generated, bad = _fields_reproducing(best, {}, wanted, MEGATRON_ARCHITECTURE)
    choice.unrepresentable += bad
    if choice.generated:
        choice.name = stem(preset_name).replace(".", "_") + "_primus"  # never a zoo name: no shadowing
    ran = megatron_architecture(with_megatron_lm_defaults(run_args))
    experiment, bad = _fields_reproducing(best, choice.generated, ran, MEGATRON_ARCHITECTURE + TRAINING_CHOICES)
    choice.experiment = {key: value for key, value in experiment.items() if choice.generated.get(key, _NONE) != value}
    choice.unrepresentable += [item for item in bad if item not in choice.unrepresentable]
    if ran["hybrid_override_pattern"] is not None:
        _hybrid_mixer(run_args, choice)
    return choice


def with_megatron_lm_defaults(args: dict) -> dict:
    """The arguments with Megatron-LM's defaults where they are left out (what Primus's run gets: its argument
    builder starts from Megatron-LM's parser defaults)."""
    return {**MEGATRON_LM_DEFAULTS, **args}


def _hybrid_mixer(run_args: dict, choice: ModelChoice) -> None:
    """The mixer the experiment's `spec` puts in the M layers (an experiment key: Primus picks it per run), and the
    Mamba numbers megatron-core does not take."""
    mixer = spec_mixer(plain(run_args.get("spec")))
    if mixer and mixer != "mamba2":
        choice.experiment["hybrid.mixer"] = mixer
    for key, fixed in FIXED_MAMBA_ARGS.items():
        value = normalized(run_args.get(key))
        if value is not None and value != fixed:
            choice.unrepresentable.append(f"{key}={value}")


_NONE = object()


def _fields_reproducing(zoo: str, fields: dict, target: dict, keys: tuple) -> tuple[dict, list[str]]:
    """Model fields over zoo preset `zoo` (and `fields`) whose translation has `target`'s values for `keys`: each
    differing argument's field is set, then the model translated again (a field can move derived arguments,
    e.g. latent attention off moves kv_channels), until nothing differs or nothing more can be set."""
    found = dict(fields)
    bad: list[str] = []
    for _ in range(4):
        ours = _translation_with(zoo, found)
        differ = [key for key in keys if target[key] is not None and target[key] != ours[key]
                  or key in MEGATRON_ARCHITECTURE and target[key] is None and ours[key] is not None]
        new, bad = _model_fields(target, [key for key in differ])
        new = {key: value for key, value in new.items() if found.get(key, _NONE) != value}
        for key, value in list(new.items()):  # a value the model schema does not allow (a choice it lacks)
            try:
                _typed(zoo, key, value)
            except ValidationError:
                bad.append(f"{next(k for k in differ if MODEL_FIELDS.get(k, ('',))[0] == key)}={value}")
                new.pop(key)
        if not new:
            break
        found.update(new)
    return {key: value for key, value in found.items() if key not in fields or fields[key] != value}, bad


def _translation_with(zoo: str, fields: dict) -> dict:
    """_megatron_translation of with_fields(zoo, fields), on a plain copy of the preset (a typed copy per call is
    most of an import's time): each value as the schema stores it."""
    model = _plain_zoo(zoo).copied()
    for dotted, value in fields.items():
        set_value(model, dotted, _typed(zoo, dotted, value))
    return _megatron_translation(model)


@lru_cache(maxsize=None)
def _plain_zoo(zoo: str) -> PlainTree:
    return PlainTree.of(zoo_models()[zoo])


@lru_cache(maxsize=None)
def _scratch_zoo(zoo: str) -> DictConfig:
    return zoo_models()[zoo].copy()  # typed: _typed sets a value on it and puts the preset's back


def _typed(zoo: str, dotted: str, value: Any) -> Any:
    """`value` as zoo preset `zoo`'s schema stores it at `dotted` (an enum member, a float); ValidationError for a
    value it refuses."""
    with value_set(_scratch_zoo(zoo), dotted, value) as typed:
        return typed


def with_fields(zoo: str, fields: dict) -> DictConfig:
    """Zoo preset `zoo` with these dotted model fields set (a value its schema refuses: ValidationError)."""
    model = zoo_models()[zoo].copy()
    for dotted, value in fields.items():
        OmegaConf.update(model, dotted, value, merge=False)
    return model


OPTIONAL_FIELDS = {"head_dim", "mla.q_lora_rank", "moe.shared_expert_ffn_hidden_size", "hybrid.mamba_num_heads"}


def _model_fields(arch: dict, keys: list[str]) -> tuple[dict, list[str]]:
    """Model fields for these differing arguments; the arguments no model field holds, as key=value."""
    fields, bad = {}, []
    for key in keys:
        if key not in MODEL_FIELDS:
            bad.append(f"{key}={arch[key]}")
            continue
        name, convert = MODEL_FIELDS[key]
        off = (name.startswith("mla.") and name != "mla.enabled" and not arch["multi_latent_attention"]) or \
              (name.startswith("moe.") and name != "moe.num_experts" and not arch["num_experts"])
        if off or (arch[key] is None and name not in OPTIONAL_FIELDS and key != "num_experts"):
            continue  # a switched-off feature's numbers, or Megatron's own default
        fields[name] = convert(arch[key], arch)
    return fields, bad


def generated_model_tree(choice: ModelChoice) -> dict:
    """<out>/model/<name>.yaml's values: the base zoo preset with the Primus numbers over it."""
    model = OmegaConf.to_container(zoo_models()[choice.zoo], resolve=True, enum_to_str=True)
    model["name"] = choice.name
    for dotted, value in choice.generated.items():
        table = model
        *parents, leaf = dotted.split(".")
        for parent in parents:
            table = table.setdefault(parent, {})
        table[leaf] = value
    return model
