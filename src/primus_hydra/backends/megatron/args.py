"""The canonical config as Megatron-LM arguments: flat argparse destinations of
megatron/training/arguments.py (`--disable-bias-linear` is the dest `add_bias_linear`, and so on), the
namespace Megatron's own `parse_args` would produce. The keys Megatron takes as they are have their names in
keys.py (MEGATRON_KEYS, read group by group); the rest is derived here. `backend.extra_args` is merged last (the
user wins).

Paths that depend on the run directory (save, load, tensorboard_dir) and the mock-data tokenizer are set by the
build_args patches in patches.py, so that a user can see and switch them off by id.
"""
from __future__ import annotations

from omegaconf import DictConfig

from primus_hydra.backends.external import checkpoint_load_path, merge_extra_args, wants_checkpoints
from primus_hydra.backends.megatron.hybrid_args import architecture_variant_args
from primus_hydra.backends.megatron.keys import MEGATRON_KEYS
from primus_hydra.backends.translation_sections import translation_section
from primus_hydra.config.attention_math import attention_head_dim
from primus_hydra.config.layout import ParallelLayout
from primus_hydra.config.model_math import is_moe_layer, shared_expert_ffn_hidden_size


def build_megatron_args(cfg: DictConfig, layout: ParallelLayout) -> dict:
    args: dict = {}
    args.update(model_args(cfg.model))
    args.update(moe_args(cfg.model))
    args.update(mla_args(cfg.model))
    args.update(architecture_variant_args(cfg.model))
    args.update(training_args(cfg.module))
    args.update(parallel_args(cfg, layout))
    args.update(data_args(cfg))
    args.update(checkpoint_and_logging_args(cfg))
    return merge_extra_args(args, cfg.backend.extra_args)


@translation_section
def model_args(model: DictConfig) -> dict:
    args = {
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "ffn_hidden_size": model.ffn_hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "group_query_attention": model.num_kv_heads < model.num_attention_heads,
        "num_query_groups": model.num_kv_heads,
        **MEGATRON_KEYS.translate(model, "model"),
        "position_embedding_type": "rope",
        "rotary_base": int(model.rope_theta),  # Megatron parses --rotary-base as int
        "rotary_percent": 1.0,
        "normalization": "RMSNorm",
        "norm_epsilon": model.norm_eps,
        "swiglu": True,
        "untie_embeddings_and_output_weights": not model.tie_embeddings,
        "add_bias_linear": False,  # dest of --disable-bias-linear
        "add_qkv_bias": model.qkv_bias,
        # MLA normalises the q/kv latents (DeepSeek's q_a/kv_a layernorms) through the same switch
        "qk_layernorm": model.qk_norm or model.mla.enabled,
        "init_method_std": model.init_std,
        "make_vocab_size_divisible_by": 128,
        # the presets are dropout-free; Megatron's defaults are 0.1
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
    }
    if model.head_dim is not None:
        args["kv_channels"] = model.head_dim
    elif model.mla.enabled:
        args["kv_channels"] = model.mla.qk_nope_head_dim  # what Primus's deepseek presets set
    else:
        args["kv_channels"] = attention_head_dim(model)
    args.update(rope_scaling_args(model))
    return args


def rope_scaling_args(model: DictConfig) -> dict:
    scaling = model.rope_scaling
    kind = str(scaling.type)
    if kind == "llama3":  # Megatron's llama3.x scaling hard-codes low/high freq factors 1 and 4, original length 8192
        return {"use_rope_scaling": True, "rope_scaling_factor": scaling.factor}
    if kind == "linear":
        return {"rotary_seq_len_interpolation_factor": int(scaling.factor)}
    if kind == "yarn":  # YaRN is wired to multi-latent attention in Megatron (rope_type=yarn)
        return {
            "rope_type": "yarn",
            "rotary_scaling_factor": scaling.factor,
            "mscale": scaling.mscale,
            "mscale_all_dim": scaling.mscale_all_dim,
        }
    return {}


@translation_section
def moe_args(model: DictConfig) -> dict:
    moe = model.moe
    if moe.num_experts == 0:
        return {}
    score_function = str(moe.router_score_function)
    shared_ffn = shared_expert_ffn_hidden_size(model)
    dense, sparse = moe.first_dense_layers, model.num_layers - moe.first_dense_layers
    if moe.interleave_step > 1:  # Megatron's own every-n-th (layer % n == 0) starts at layer 0: a whole pattern
        layer_freq = "[" + ",".join(str(int(is_moe_layer(model, i))) for i in range(model.num_layers)) + "]"
    else:  # a leading run of dense layers is written as Megatron's layer pattern (1 = MoE layer)
        layer_freq = f"([0]*{dense}+[1]*{sparse})" if dense else 1
    return {
        "num_experts": moe.num_experts,
        "moe_router_topk": moe.top_k,
        "moe_ffn_hidden_size": moe.ffn_hidden_size,
        "moe_shared_expert_intermediate_size": shared_ffn or None,
        "moe_layer_freq": layer_freq,
        "moe_apply_probs_on_input": bool(moe.score_before_experts),  # the router's weight on the input (Llama 4)
        "moe_router_score_function": score_function,
        # softmax over all experts without renormalising the top-k (DeepSeek-V2, Qwen2-MoE) is Megatron's
        # pre-softmax routing; sigmoid scores are always renormalised by Megatron
        "moe_router_pre_softmax": score_function == "softmax" and not moe.router_norm_topk_prob,
        "moe_router_topk_scaling_factor": moe.router_topk_scaling_factor,
        "moe_router_num_groups": moe.router_num_groups if moe.router_num_groups > 1 else None,
        "moe_router_group_topk": moe.router_group_topk if moe.router_num_groups > 1 else None,
        "moe_router_enable_expert_bias": moe.router_enable_expert_bias,
        "moe_router_bias_update_rate": moe.router_bias_update_rate,
        "moe_router_load_balancing_type": str(moe.load_balancing_type),
        "moe_aux_loss_coeff": moe.aux_loss_coeff,
        "moe_z_loss_coeff": moe.z_loss_coeff or None,
        "moe_expert_capacity_factor": moe.capacity_factor,
        "moe_token_dispatcher_type": "alltoall",  # the dispatcher Megatron recommends with expert parallelism
    }


@translation_section
def mla_args(model: DictConfig) -> dict:
    mla = model.mla
    if not mla.enabled:
        return {}
    return {
        "multi_latent_attention": True,
        "q_lora_rank": mla.q_lora_rank,
        "kv_lora_rank": mla.kv_lora_rank,
        "qk_head_dim": mla.qk_nope_head_dim,  # Megatron: q_head_dim = qk_head_dim + qk_pos_emb_head_dim
        "qk_pos_emb_head_dim": mla.qk_rope_head_dim,
        "v_head_dim": mla.v_head_dim,
    }


def optimizer_args(m: DictConfig) -> dict:
    """Megatron-core's optimizer names (Megatron-Bridge's OptimizerConfig uses the same ones)."""
    return {
        "optimizer": "adam",  # Megatron's adam is AdamW (decoupled weight decay)
        **MEGATRON_KEYS.translate(m, "optimizer"),
        "bf16": str(m.precision) == "bf16",
        "fp16": False,
    }


def scheduler_args(m: DictConfig) -> dict:
    return {
        "lr_decay_style": str(m.lr_decay_style),
        **MEGATRON_KEYS.translate(m, "scheduler"),
        "lr_decay_iters": m.lr_decay_iters or m.train_iters,
    }


@translation_section
def training_args(m: DictConfig) -> dict:
    return {
        **MEGATRON_KEYS.translate(m, "training"),
        # Megatron-LM evaluates every eval_interval steps and after training; eval_iters=0 turns it off
        "eval_interval": m.eval_interval or m.train_iters,
        "eval_iters": m.eval_iters if m.eval_interval else 0,
        "split": str(m.data.split),
        **optimizer_args(m),
        **scheduler_args(m),
    }


@translation_section
def parallel_args(cfg: DictConfig, layout: ParallelLayout) -> dict:
    """The job's layout (as prepared) in Megatron's names, and how Megatron runs it."""
    p, backend = cfg.module.parallel, cfg.backend
    args = {
        **MEGATRON_KEYS.translate(layout, "layout"),
        **MEGATRON_KEYS.translate(p, "parallel"),
        **MEGATRON_KEYS.translate(backend, "distributed"),
        "transformer_impl": backend.transformer_impl,
    }
    for key in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        if backend.get(key) is not None:
            args[key] = backend[key]
    if backend.get("pipeline_layout") is not None:  # megatron-core derives the virtual stages from it
        args["pipeline_model_parallel_layout"] = str(backend.pipeline_layout)
    if layout.fsdp:
        # Megatron rejects torch FSDP2 together with its distributed optimizer and gradient-accumulation fusion
        args.update(use_torch_fsdp2=True, use_distributed_optimizer=False, gradient_accumulation_fusion=False)
    if backend.recompute_granularity:
        args["recompute_granularity"] = backend.recompute_granularity
        if backend.recompute_granularity == "full":  # full recompute needs a method; default: one layer per unit
            args.update(recompute_method=backend.recompute_method or "uniform",
                        recompute_num_layers=backend.recompute_num_layers or 1)
    return args


@translation_section
def data_args(cfg: DictConfig) -> dict:
    data, backend = cfg.module.data, cfg.backend
    num_workers = data.num_workers
    args = {
        "mock_data": str(data.source) == "mock",
        # Megatron's --data-path: a prefix of <prefix>.bin / <prefix>.idx, or a blend "weight prefix ..." (source=text:
        # the run dir's indexed copy of the text, patch megatron.args.text_as_indexed)
        "data_path": str(data.path).split() if data.path and str(data.source) == "indexed" else None,
        **MEGATRON_KEYS.translate(backend, "tokenizer"),
    }
    if isinstance(num_workers, int):
        args["num_workers"] = num_workers
    return args


@translation_section
def checkpoint_and_logging_args(cfg: DictConfig) -> dict:
    ckpt, log = cfg.module.checkpoint, cfg.module.log
    load = checkpoint_load_path(cfg)
    return {
        # module.checkpoint.dir as prepared (default: <run_dir>/checkpoints); Megatron saves at the end when set
        "save": str(ckpt.dir) if ckpt.dir and wants_checkpoints(cfg) else None,
        "save_interval": ckpt.interval or None,
        "load": load,
        "finetune": bool(ckpt.load),  # weights only: Megatron skips optimizer/rng state and restarts at iteration 0
        **MEGATRON_KEYS.translate(log, "logging"),
        "tensorboard_dir": None,  # patch megatron.args.tensorboard_path
    }
