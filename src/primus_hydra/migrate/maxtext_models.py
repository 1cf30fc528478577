"""A MaxText experiment's model as a canonical model.

MaxText has no release for this Python, so its numbers are taken from its published model configs
(AI-Hypercomputer/maxtext e591f30, src/maxtext/configs/models/<model_name>.yml and configs/base.yml), each zoo preset
matched against its model card. A named model is the zoo preset with MaxText's numbers (and where MaxText's config
differs from the card, MaxText's value in the experiment). model_name=default runs base.yml's sizes under what the
Primus model preset and the overrides set (Primus's grok1.yaml sets Grok-1's): that model is generated over the
closest zoo preset, and the translation is the oracle, as for Megatron (models.py): the generated model, translated
back by the backend itself (backends/maxtext/args.py), must give every architecture key MaxText would run with.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf.errors import ValidationError

from primus_hydra.errors import PrimusError
from primus_hydra.migrate.models import ModelChoice, same_normalized, stem, with_fields, zoo_models
from primus_hydra.migrate.primus_yaml import TrainerModule, plain

if TYPE_CHECKING:
    from primus_hydra.migrate.mapping import Imported

# MaxText model_name -> the zoo preset its configs/models/<model_name>.yml has the numbers of
MAXTEXT_MODELS = {"llama2-7b": "llama2_7b", "llama2-13b": "llama2_13b", "llama2-70b": "llama2_70b",
                  "llama3-8b": "llama3_8b", "llama3-70b": "llama3_70b", "llama3.1-8b": "llama3.1_8b",
                  "llama3.1-70b": "llama3.1_70b", "llama3.1-405b": "llama3.1_405b", "mixtral-8x7b": "mixtral_8x7b",
                  "mixtral-8x22b": "mixtral_8x22b", "deepseek2-16b": "deepseek_v2_lite", "deepseek3-671b": "deepseek_v3",
                  "llama3.3-70b": "llama3.1_70b",  # Llama 3.3 70B has Llama 3.1 70B's architecture
                  "qwen3-8b": "qwen3_8b", "qwen3-14b": "qwen3_14b", "qwen3-30b-a3b": "qwen3_30b_a3b",
                  "gemma4-26b": "gemma4_26b", "gemma4-31b": "gemma4_31b"}
# where MaxText's model config differs from the model card its zoo preset follows: MaxText's value, in the experiment
MAXTEXT_MODEL_CHANGES = {"qwen3-30b-a3b": {"rope_theta": 10_000_000.0}}  # rope_max_timescale: 10_000_000
# base.yml's architecture keys that the canonical model holds, as model_name=default has them
MAXTEXT_BASE_ARCHITECTURE = {
    "decoder_block": "llama2", "base_emb_dim": 2048, "base_num_query_heads": 16, "base_num_kv_heads": 16,
    "base_mlp_dim": 7168, "base_num_decoder_layers": 16, "head_dim": 128, "vocab_size": 32_000,
    "mlp_activations": ["silu", "linear"], "normalization_layer_epsilon": 1e-5, "logits_via_embedding": False,
    "use_qk_norm": False, "rope_max_timescale": 10_000, "rope_type": "default",
    "num_experts": 1, "num_experts_per_tok": 1, "base_moe_mlp_dim": -1, "first_num_dense_layers": 0,
    "shared_experts": 0, "routed_scaling_factor": 1.0, "routed_bias": False, "load_balance_loss_weight": 0.0,
}
MOE_KEYS = ("num_experts_per_tok", "base_moe_mlp_dim", "first_num_dense_layers", "shared_experts",
            "routed_scaling_factor", "routed_bias", "load_balance_loss_weight")
# base.yml's keys for what the canonical model does not have, at the value that switches it off
MAXTEXT_UNHELD_FEATURES = {
    "attention_type": "global", "sliding_window_size": 0, "attn_logits_soft_cap": 0.0, "final_logits_soft_cap": 0.0,
    "use_post_attn_norm": False, "use_post_ffw_norm": False, "mlp_bias": False, "attention_bias": False,
    "global_head_dim": 0, "global_num_kv_heads": 0, "share_kv_projections": False, "interleave_moe_layer_step": 1,
    "inhomogeneous_layer_cycle_interval": 1, "mlp_activations_limit": -1.0, "trainable_position_size": -1,
    "use_untrainable_positional_embedding": False, "mtp_num_layers": 0,
}
# MaxText's decoder blocks (common_types.DecoderBlockType) -> the canonical family that args.py translates back, and
# whether the block's MLP is a mixture of experts (MaxText's llama2 and qwen3 blocks are dense, its mixtral block MoE)
BLOCKS = {"llama2": ("llama", False), "mixtral": ("mixtral", True), "qwen3": ("qwen3", False)}


def maxtext_model(module: TrainerModule, imported: Imported) -> ModelChoice:
    """The zoo preset of the experiment's model_name, or the model model_name=default gives (PrimusError, one line,
    for a model the canonical model cannot hold)."""
    name = plain(module.params.get("model_name"))
    if name == "default":
        imported.consumed.update(key for key in MAXTEXT_BASE_ARCHITECTURE if key in module.params)  # the model's
        try:
            return default_model(module.params, module.model)
        except (TypeError, ValidationError) as error:  # a size that is no number of the right kind
            given = ", ".join(f"{key}={plain(module.params[key])!r}" for key in MAXTEXT_BASE_ARCHITECTURE
                              if key in module.params)
            raise PrimusError(f"model_name=default (model {plain(module.model)}): {given}: not a model "
                              f"({str(error).splitlines()[0]})") from None
    if name not in MAXTEXT_MODELS:
        raise PrimusError(f"model_name={name}: no zoo preset is MaxText's {name} (known: "
                          f"{', '.join(sorted(MAXTEXT_MODELS))})")
    changes = MAXTEXT_MODEL_CHANGES.get(name, {})
    if changes:
        imported.warnings.append(f"model_name={name}: MaxText's model config sets "
                                 f"{', '.join(f'model.{key}={value}' for key, value in changes.items())} where the "
                                 f"model card of the zoo preset {MAXTEXT_MODELS[name]} differs; imported as MaxText runs it")
    return ModelChoice(MAXTEXT_MODELS[name], experiment=dict(changes))


def default_architecture(params: dict) -> dict:
    """What MaxText runs model_name=default with: base.yml's architecture keys under the experiment's."""
    arch = {key: plain(params.get(key, default)) for key, default in MAXTEXT_BASE_ARCHITECTURE.items()}
    if arch["num_experts"] > 1 and arch["base_moe_mlp_dim"] == -1:
        arch["base_moe_mlp_dim"] = arch["base_mlp_dim"]  # MaxText requires them equal in a model of only MoE layers
    return arch


def default_model(params: dict, preset_name: Any) -> ModelChoice:
    """model_name=default: the sizes the experiment gives MaxText, over the closest zoo preset of the same decoder
    block and kind (dense/MoE); named after the Primus model preset (<preset>_maxtext: never a zoo name)."""
    where = f"model_name=default (model {plain(preset_name)})"
    unheld = [f"{key}={plain(params[key])}" for key, off in MAXTEXT_UNHELD_FEATURES.items()
              if key in params and not same_normalized(plain(params[key]), off)]
    if unheld:
        raise PrimusError(f"{where}: {', '.join(unheld)}: MaxText features the canonical model "
                          f"(config/schema_model.py) cannot hold")
    arch = default_architecture(params)
    moe = arch["num_experts"] > 1
    family, block_moe = BLOCKS.get(arch["decoder_block"], (None, None))
    bases = [name for name, model in zoo_models().items()
             if model.family == family and bool(model.moe.num_experts) == moe and not model.mla.enabled]
    if arch["mlp_activations"] != ["silu", "linear"] or arch["rope_type"] != "default" or moe != block_moe \
            or not bases:
        raise PrimusError(f"{where}: decoder_block={arch['decoder_block']}, num_experts={arch['num_experts']}, "
                          f"mlp_activations={arch['mlp_activations']}, rope_type={arch['rope_type']}: the canonical "
                          f"model holds MaxText's dense llama2 and qwen3 blocks and its MoE mixtral block, with SwiGLU "
                          f"(silu, linear) and plain RoPE")
    fields = canonical_fields(arch)
    base = min(bases, key=lambda name: sum(not same_normalized(plain(_dotted(zoo_models()[name], key)), value)
                                           for key, value in fields.items()))
    model = with_fields(base, fields)
    differ = _translation_differs(model, arch)
    if differ:
        raise PrimusError(f"{where}: {', '.join(differ)}: the canonical model does not reproduce these")
    generated = {key: value for key, value in fields.items()
                 if not same_normalized(plain(_dotted(zoo_models()[base], key)), value)}
    return ModelChoice(base, generated=generated, name=f"{stem(preset_name).replace('.', '_')}_maxtext")


def canonical_fields(arch: dict) -> dict:
    """The canonical model fields of a MaxText architecture (MaxText's mixtral and qwen3 blocks softmax the top-k
    router logits: the top-k weights always sum to one)."""
    fields = {
        "family": BLOCKS[arch["decoder_block"]][0], "hidden_size": arch["base_emb_dim"],
        "num_layers": arch["base_num_decoder_layers"], "num_attention_heads": arch["base_num_query_heads"],
        "num_kv_heads": arch["base_num_kv_heads"], "head_dim": arch["head_dim"], "ffn_hidden_size": arch["base_mlp_dim"],
        "vocab_size": arch["vocab_size"], "norm_eps": float(arch["normalization_layer_epsilon"]),
        "tie_embeddings": bool(arch["logits_via_embedding"]), "qk_norm": bool(arch["use_qk_norm"]),
        "rope_theta": float(arch["rope_max_timescale"]), "rope_scaling.type": "none",
        "moe.num_experts": arch["num_experts"] if arch["num_experts"] > 1 else 0,
    }
    if arch["num_experts"] > 1:
        balance = float(arch["load_balance_loss_weight"])
        fields.update({
            "moe.top_k": arch["num_experts_per_tok"], "moe.ffn_hidden_size": arch["base_moe_mlp_dim"],
            "moe.first_dense_layers": arch["first_num_dense_layers"], "moe.shared_experts": arch["shared_experts"],
            "moe.router_topk_scaling_factor": float(arch["routed_scaling_factor"]),
            "moe.router_enable_expert_bias": bool(arch["routed_bias"]), "moe.router_norm_topk_prob": True,
            "moe.router_score_function": "softmax", "moe.router_num_groups": 1, "moe.router_group_topk": 1,
            "moe.load_balancing_type": "aux_loss" if balance else "none",
            **({"moe.aux_loss_coeff": balance} if balance else {}),
        })
    return fields


def _translation_differs(model, arch: dict) -> list[str]:
    """`key=MaxText's value (translated: ours)` for every architecture key the model translates differently."""
    from primus_hydra.backends.maxtext.args import model_config

    ours = model_config(model)
    keys = [key for key in MAXTEXT_BASE_ARCHITECTURE if arch["num_experts"] > 1 or key not in MOE_KEYS]
    return [f"{key}={arch[key]} (translated: {ours.get(key)})" for key in keys
            if key in ours and not same_normalized(ours[key], arch[key])]


def _dotted(model, dotted: str) -> Any:
    node = model
    for part in dotted.split("."):
        node = node[part]
    return node
