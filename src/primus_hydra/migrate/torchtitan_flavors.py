"""A torchtitan flavor no zoo preset is, as a canonical model generated from torchtitan's own numbers.

The numbers are read from the installed torchtitan's model registry (TrainSpec.model_args of torchtitan.models.<name>)
when task=import runs, never when a config is composed; the generated model file keeps them, so a later torchtitan
release that changes a flavor changes nothing already imported. The releases whose registry is read that way are
pinned (FLAVOR_TABLE_RELEASES: 0.3 builds its models from per-layer Config trees instead).

The translation is the oracle, as for Megatron (models.py): the generated model, translated back into torchtitan's
model args by the backend itself (backends/torchtitan/args.py), must give every number of the flavor; a flavor it
does not reproduce is refused in one line naming what differs. Families with an architecture the canonical model
cannot hold at all are refused by what it cannot hold.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from omegaconf import OmegaConf

from primus_hydra.backends.extra_args_owners import flatten
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.models import ModelChoice, same_normalized, stem, with_fields, zoo_models
from primus_hydra.migrate.torchtitan_registry import flavor_table, read_ahead
from primus_hydra.util.installed import installed_version

FLAVOR_TABLE_RELEASES = ("0.2.",)
# model args a run decides (the backend writes its own sequence length and attention kernel), not the architecture
RUN_CHOICES = {"max_seq_len", "attn_type", "attn_mask_type", "max_batch_size", "eos_id", "depth_init",
               "use_grouped_mm", "_debug_force_load_balance", "expert_parallel_comm_backend"}


def torchtitan_flavor_model(name: str, flavor: str, preset_name: str) -> ModelChoice:
    """The canonical model of torchtitan's `name` `flavor`: the closest zoo preset of its family with the flavor's
    numbers written over it, named after the Primus model preset that names the flavor (<preset>_torchtitan: never
    a zoo name)."""
    from primus_hydra.backends.torchtitan.args import TORCHTITAN_MODEL_NAMES

    where = f"model.name={name} model.flavor={flavor}"
    args = flavor_args(name, flavor)
    if name == "llama4" and _llama4_features(args):
        raise PrimusError(f"{where}: torchtitan's llama4 {flavor} has {', '.join(_llama4_features(args))}, which "
                          f"the canonical model (config/schema_model.py) cannot hold")
    family = {torchtitan: ours for ours, torchtitan in TORCHTITAN_MODEL_NAMES.items()}.get(name)
    if family is None:
        raise PrimusError(f"{where}: no canonical translation for torchtitan's {name} (this project translates "
                          f"{', '.join(sorted(TORCHTITAN_MODEL_NAMES.values()))})")
    fields = FIELDS[name](args)
    base = _closest_zoo(family, fields)
    model = with_fields(base, fields)
    differ = flavor_differences(name, model, args)
    if differ:
        raise PrimusError(f"{where}: the canonical model cannot hold torchtitan's {name} {flavor} "
                          f"({'; '.join(differ)})")
    ours = zoo_models()[base]
    generated = {key: value for key, value in fields.items() if OmegaConf.select(ours, key) != value}
    return ModelChoice(base, generated=generated, name=stem(preset_name).replace(".", "_") + "_torchtitan")


def read_tables_ahead(files: Iterable[Path]) -> None:
    """torchtitan's flavor tables read ahead by a helper process (torchtitan_registry.read_ahead) where any of `files`
    names torchtitan and the installed release keeps them where they are read from."""
    release = installed_version("torchtitan")
    if release is not None and release.startswith(FLAVOR_TABLE_RELEASES):
        read_ahead(files)


def flavor_args(name: str, flavor: str) -> Any:
    """The installed torchtitan's model args of this flavor, as nested dicts read by attribute (read by importing
    torchtitan, and so torch: task=import only; migrate/torchtitan_registry.py)."""
    where = f"model.name={name} model.flavor={flavor}"
    release = installed_version("torchtitan")
    if release is None:
        raise PrimusError(f"{where}: no zoo preset is this flavor, and torchtitan is not installed to read its "
                          f"numbers from (install torchtitan {FLAVOR_TABLE_RELEASES[0]}x, or add a preset to "
                          f"conf/model/)")
    if not release.startswith(FLAVOR_TABLE_RELEASES):
        raise PrimusError(f"{where}: no zoo preset is this flavor, and the installed torchtitan {release} keeps its "
                          f"flavors otherwise than the releases read here ({', '.join(FLAVOR_TABLE_RELEASES)}x: "
                          f"TrainSpec.model_args)")
    try:
        table = flavor_table(name)
    except ValueError:
        raise PrimusError(f"{where}: torchtitan {release} has no model {name}") from None
    if flavor not in table:
        raise PrimusError(f"{where}: torchtitan {release}'s {name} has the flavors {', '.join(table)}")
    return table[flavor]


def _llama4_features(args: Any) -> list[str]:
    features = []
    if args.every_n_layers_nope:
        features.append(f"chunked attention without rope on every {args.every_n_layers_nope}th layer (iRoPE)")
    return features


# -- the flavor's numbers as model fields -------------------------------------------------------------------------
def _plain_attention(args: Any) -> dict:
    return {"hidden_size": args.dim, "num_layers": args.n_layers, "num_attention_heads": args.n_heads,
            "num_kv_heads": args.n_kv_heads or args.n_heads, "vocab_size": args.vocab_size,
            "norm_eps": float(args.norm_eps), "rope_theta": float(args.rope_theta), "qkv_bias": False,
            "mla.enabled": False, "moe.num_experts": 0}


def _llama3_fields(args: Any) -> dict:
    return _llama_fields(args)  # torchtitan's llama3 always scales its rope frequencies (Llama 3.1's way)


def _llama_fields(args: Any) -> dict:
    """llama3's and llama4's attention, dense FFN width and rope (scaled the Llama 3.1 way, or not at all)."""
    from primus_hydra.backends.torchtitan.args import llama_ffn_hidden_dim

    scaling = args.rope_scaling_args
    rope = ({"rope_scaling.type": "llama3", "rope_scaling.factor": float(scaling.scaling_factor),
             "rope_scaling.low_freq_factor": float(scaling.low_freq_factor),
             "rope_scaling.high_freq_factor": float(scaling.high_freq_factor),
             "rope_scaling.original_max_position_embeddings": scaling.original_max_position_embeddings}
            if scaling is not None else {"rope_scaling.type": "none"})
    return {**_plain_attention(args), "head_dim": None, "qk_norm": False, "tie_embeddings": False,
            "ffn_hidden_size": llama_ffn_hidden_dim(args.dim, args.multiple_of, args.ffn_dim_multiplier), **rope}


def _llama4_fields(args: Any) -> dict:
    """Llama 4: every interleave_moe_layer_step-th layer MoE (top-1, a shared expert, the score on the expert's
    input), the others llama3's dense FFN; the experts' width derived from the dense one (torchtitan's model.py)."""
    moe = args.moe_args
    return {**_llama_fields(args),
            **_moe_fields(moe, _llama4_expert_width(args), first_dense_layers=0),
            "moe.interleave_step": args.interleave_moe_layer_step,
            "moe.score_before_experts": bool(moe.score_before_experts)}


def _llama4_expert_width(args: dict) -> int:
    """The experts' width a llama4 flavor's args (as a dict) make."""
    from primus_hydra.backends.torchtitan.args import llama4_expert_widths

    moe = args["moe_args"]
    return llama4_expert_widths(args["dim"], args["multiple_of"], args["ffn_dim_multiplier"],
                                moe["top_k"] + moe["num_shared_experts"])[bool(args["auto_scale_hidden_dim"])]


def _qwen3_fields(args: Any) -> dict:
    fields = {**_plain_attention(args), "head_dim": args.head_dim, "ffn_hidden_size": args.hidden_dim,
              "qk_norm": bool(args.qk_norm), "tie_embeddings": bool(args.enable_weight_tying),
              "rope_scaling.type": "none"}
    if args.moe_enabled:  # every layer's FFN is the MoE
        fields.update(_moe_fields(args.moe_args, args.moe_inter_dim, first_dense_layers=0))
    return fields


def _deepseek_v3_fields(args: Any) -> dict:
    return {"hidden_size": args.dim, "num_layers": args.n_layers, "num_attention_heads": args.n_heads,
            "num_kv_heads": args.n_heads, "head_dim": None, "ffn_hidden_size": args.inter_dim,
            "vocab_size": args.vocab_size, "norm_eps": float(args.norm_eps), "rope_theta": float(args.rope_theta),
            "qkv_bias": False, "qk_norm": False, "tie_embeddings": False,
            "mla.enabled": True, "mla.q_lora_rank": args.q_lora_rank or None, "mla.kv_lora_rank": args.kv_lora_rank,
            "mla.qk_nope_head_dim": args.qk_nope_head_dim, "mla.qk_rope_head_dim": args.qk_rope_head_dim,
            "mla.v_head_dim": args.v_head_dim,
            "rope_scaling.type": "yarn", "rope_scaling.factor": float(args.rope_factor),
            "rope_scaling.original_max_position_embeddings": args.original_seq_len,
            "rope_scaling.beta_fast": float(args.beta_fast), "rope_scaling.beta_slow": float(args.beta_slow),
            # torchtitan has one softmax-scale factor; Hugging Face's DeepSeek configs write it twice
            "rope_scaling.mscale": float(args.mscale), "rope_scaling.mscale_all_dim": float(args.mscale),
            **_moe_fields(args.moe_args, args.moe_inter_dim, first_dense_layers=args.n_dense_layers)}


def _moe_fields(moe: Any, expert_width: int, first_dense_layers: int) -> dict:
    """torchtitan's MoEArgs as model fields; its MoE adds no auxiliary loss (it balances with the expert bias)."""
    return {"moe.num_experts": moe.num_experts, "moe.top_k": moe.top_k, "moe.ffn_hidden_size": expert_width,
            "moe.shared_experts": moe.num_shared_experts, "moe.shared_expert_ffn_hidden_size": None,
            "moe.first_dense_layers": first_dense_layers, "moe.router_score_function": moe.score_func,
            "moe.router_topk_scaling_factor": float(moe.route_scale), "moe.router_norm_topk_prob": bool(moe.route_norm),
            "moe.router_num_groups": moe.num_expert_groups or 1, "moe.router_group_topk": moe.num_limited_groups or 1,
            "moe.router_enable_expert_bias": moe.load_balance_coeff is not None,
            "moe.router_bias_update_rate": float(moe.load_balance_coeff or 0.0),
            "moe.load_balancing_type": "none", "moe.aux_loss_coeff": 0.0}


def _gpt_oss_fields(args: Any) -> dict:
    """gpt_oss: every layer MoE with biased experts and router, sinks and biases in the attention, the window on
    even layers, the clamped SwiGLU and YaRN (ntk_alpha/ntk_beta are YaRN's beta_slow/beta_fast)."""
    return {**_plain_attention(args), "head_dim": args.head_dim, "ffn_hidden_size": args.moe_inter_dim,
            "qkv_bias": True, "attention_output_bias": True, "attention_sinks": True, "qk_norm": False,
            "tie_embeddings": False, "sliding_window": args.sliding_window_size, "full_attention_every": 2,
            "swiglu_limit": float(args.swiglu_limit),
            "rope_scaling.type": "yarn" if args.rope_factor > 1 else "none",
            "rope_scaling.factor": float(args.rope_factor),
            "rope_scaling.original_max_position_embeddings": args.original_seq_len,
            "rope_scaling.beta_fast": float(args.ntk_beta), "rope_scaling.beta_slow": float(args.ntk_alpha),
            "rope_scaling.mscale": 1.0, "rope_scaling.mscale_all_dim": 0.0,
            **_moe_fields(args.moe_args, args.moe_inter_dim, first_dense_layers=0),
            "moe.router_bias": bool(args.moe_args.gate_bias), "moe.experts_bias": True}


FIELDS = {"llama3": _llama3_fields, "qwen3": _qwen3_fields, "deepseek_v3": _deepseek_v3_fields,
          "llama4": _llama4_fields, "gpt_oss": _gpt_oss_fields}


def _closest_zoo(family: str, fields: dict) -> str:
    """The zoo preset of this family that the fewest of the fields change (a name breaks a tie)."""
    def changed(zoo: str) -> int:
        return sum(OmegaConf.select(zoo_models()[zoo], key) != value for key, value in fields.items())

    return min((zoo for zoo, model in zoo_models().items() if model.family == family), key=lambda z: (changed(z), z))


# -- the oracle: the backend's own translation of the generated model ----------------------------------------------
def flavor_differences(name: str, model: Any, args: Any) -> list[str]:
    """`key: torchtitan=<flavor's> translated=<ours>` for every model arg the backend's translation of `model` writes
    differently from the flavor (what a run trains is the flavor's args with the translated ones over them)."""
    from primus_hydra.backends.torchtitan.args import model_args_section

    translated = flatten(_normalized(name, model_args_section(model, args.max_seq_len)))
    flavor = flatten(_normalized(name, args))
    return [f"{key}: torchtitan={flavor.get(key, '(no such arg)')!r} translated={value!r}"
            for key, value in translated.items()
            if key.split(".")[-1] not in RUN_CHOICES and not same_normalized(flavor.get(key, _ABSENT), value)]


_ABSENT = object()


def _normalized(name: str, args: dict) -> dict:
    """What torchtitan derives in place of what it derives it from: llama3's and llama4's FFN widths for their
    (multiple_of, ffn_dim_multiplier) pair (pairs differ, the widths are the architecture; llama4's experts' width
    also comes from auto_scale_hidden_dim), n_kv_heads for None (one per head)."""
    if name not in ("llama3", "llama4"):
        return args
    from primus_hydra.backends.torchtitan.args import llama_ffn_hidden_dim

    derived_from = ("multiple_of", "ffn_dim_multiplier", "auto_scale_hidden_dim")
    rest = {key: value for key, value in args.items() if key not in derived_from}
    widths = {"ffn_width": llama_ffn_hidden_dim(args["dim"], args["multiple_of"], args["ffn_dim_multiplier"])}
    if name == "llama4":
        widths["expert_width"] = _llama4_expert_width(args)
    return {**rest, "n_kv_heads": args["n_kv_heads"] or args["n_heads"], **widths}
