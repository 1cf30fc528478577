"""Megatron-LM's argument namespace (args.py, after the build_args patches) as megatron-core's own objects: a
TransformerConfig (or MLATransformerConfig) and GPTModel's keyword arguments, the way Megatron-LM's
`core_transformer_config_from_args` and `gpt_builders` read the same namespace. The trainer builds from this, so a
wrong translation in args.py shows as a different model (the cross-backend tests catch it).
"""
from __future__ import annotations

import dataclasses
import logging
import re
import typing
from typing import Any

from primus_hydra.config.model_math import padded_vocab

# argument destinations whose TransformerConfig field has another name
FIELD_RENAMES = {"num_experts": "num_moe_experts", "norm_epsilon": "layernorm_epsilon",
                 "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
                 "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage"}
# fields where None is a setting, not "unset": q_lora_rank=None is a full-rank q projection (the default is 512)
NONE_IS_A_VALUE = ("q_lora_rank",)
# fused kernels that need Transformer Engine / Apex / CUDA; off for the local layer spec
FUSIONS = ("apply_rope_fusion", "masked_softmax_fusion", "bias_activation_fusion", "bias_dropout_fusion",
           "gradient_accumulation_fusion", "persist_layer_norm")


def quiet_library_logs() -> None:
    """megatron-core logs every parameter name and its whole optimizer config at INFO, and warns about its own
    internals on every step: keep its warnings and errors, drop the rest."""
    import warnings

    logging.getLogger("megatron.core").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module=r"megatron\.core\.")
    warnings.filterwarnings("ignore", message=r".*all_gather_into_tensor.* is deprecated")
    warnings.filterwarnings("ignore", message=r".*reduce_scatter_tensor.* is deprecated")


# per-layer switches Megatron-LM's parser takes as an int (every n-th layer) or a pattern string (its moe_freq_type)
LAYER_PATTERN_ARGS = ("moe_layer_freq", "linear_attention_freq")


def layer_pattern(value: Any, num_layers: int, key: str = "moe_layer_freq") -> Any:
    """A per-layer switch as Megatron-LM's parser reads it: an int (every n-th layer) or a pattern string such as
    "([0]*1+[1]*26)", "([1]*3+[0])*2" or "[1,0,1]", parsed without eval."""
    if not isinstance(value, str):
        return value
    text = value.replace(" ", "")
    repeat = re.fullmatch(r"\((.*)\)\*(\d+)", text)
    text, times = (repeat.group(1), int(repeat.group(2))) if repeat else (text.strip("()"), 1)
    pattern: list[int] = []
    for part in text.split("+"):
        repeated = re.fullmatch(r"\[([01](?:,[01])*)\](?:\*(\d+))?", part)
        if not repeated:
            raise ValueError(f"{key}={value!r}: expected an int or a pattern such as ([0]*1+[1]*3)")
        pattern += [int(bit) for bit in repeated.group(1).split(",")] * int(repeated.group(2) or 1)
    pattern *= times
    if len(pattern) != num_layers:
        raise ValueError(f"{key}={value!r} names {len(pattern)} layers, the model has {num_layers}")
    return pattern


def transformer_config(args: dict, fused: bool, use_cpu_initialization: bool, params_dtype: Any = None) -> Any:
    """The TransformerConfig for these arguments: every argument that names a config field, plus what Megatron-LM
    derives (SwiGLU, query groups, the MLA config class)."""
    config_class, kwargs = transformer_config_fields(args, fused, use_cpu_initialization, params_dtype)
    return config_class(**kwargs)


def transformer_config_fields(args: dict, fused: bool, use_cpu_initialization: bool,
                              params_dtype: Any = None) -> tuple[type, dict]:
    """The config class (TransformerConfig or MLATransformerConfig) and its keyword arguments for these arguments
    (Megatron-Bridge's model providers take the same fields)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    refuse_unknown_score_function(args, TransformerConfig)
    config_class = MLATransformerConfig if args.get("multi_latent_attention") else TransformerConfig
    fields = {field.name for field in dataclasses.fields(config_class)}
    kwargs = {}
    for key, value in args.items():
        name = FIELD_RENAMES.get(key, key)
        if name in fields and (value is not None or name in NONE_IS_A_VALUE):
            kwargs[name] = value
    if args.get("swiglu"):
        kwargs.update(gated_linear_unit=True, activation_func=F.silu)
    if not args.get("group_query_attention"):
        kwargs["num_query_groups"] = None
    for key in LAYER_PATTERN_ARGS:
        if key in kwargs:
            kwargs[key] = layer_pattern(kwargs[key], args["num_layers"], key)
    if args.get("multi_latent_attention"):  # MLA takes its rope settings in the config, not in GPTModel
        kwargs.update(rotary_base=args.get("rotary_base", 10000), rotary_percent=args.get("rotary_percent", 1.0))
    for name in FUSIONS:
        kwargs[name] = fused and kwargs.get(name, True)
    dtype = params_dtype or (torch.bfloat16 if args.get("bf16") else torch.float32)
    kwargs.update(params_dtype=dtype, pipeline_dtype=dtype, use_cpu_initialization=use_cpu_initialization,
                  deallocate_pipeline_outputs=True)
    if not args.get("add_bias_linear", True):
        kwargs["add_bias_linear"] = False
    stages = args.get("num_virtual_stages_per_pipeline_rank") or 1
    if stages > 1:  # layer offsets of each virtual stage come from the config
        kwargs["virtual_pipeline_model_parallel_size"] = stages
    return config_class, kwargs


def refuse_unknown_score_function(args: dict, config_class: type) -> None:
    """megatron-core routes with the score functions its TransformerConfig names (0.16: softmax, sigmoid); another
    one (DeepSeek-V4's sqrtsoftplus) passes its config checks and fails only at the first routing."""
    score_function = args.get("moe_router_score_function")
    field = next(f for f in dataclasses.fields(config_class) if f.name == "moe_router_score_function")
    known = typing.get_args(field.type)
    if args.get("num_experts") and score_function is not None and known and score_function not in known:
        raise ValueError(f"moe_router_score_function={score_function} (model.moe.router_score_function): this "
                         f"megatron-core routes with {' or '.join(known)} only; train this model with backend=torch")


def gpt_model_kwargs(args: dict) -> dict:
    """GPTModel's own arguments (embedding, output layer, positions)."""
    tp = args.get("tensor_model_parallel_size", 1)
    kwargs = {
        "vocab_size": padded_vocab(args["vocab_size"], tp, args.get("make_vocab_size_divisible_by", 128)),
        "max_sequence_length": args["max_position_embeddings"],
        "share_embeddings_and_output_weights": not args.get("untie_embeddings_and_output_weights", False),
        "position_embedding_type": args.get("position_embedding_type", "rope"),
        "rotary_percent": args.get("rotary_percent", 1.0),
        "rotary_base": args.get("rotary_base", 10000),
        "rope_scaling": bool(args.get("use_rope_scaling", False)),
        "seq_len_interpolation_factor": args.get("rotary_seq_len_interpolation_factor"),
    }
    if args.get("rope_scaling_factor") is not None:
        kwargs["rope_scaling_factor"] = args["rope_scaling_factor"]
    return kwargs
