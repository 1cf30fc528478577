"""The canonical config as MaxText's flat key=value config (names of MaxText's src/MaxText/configs/base.yml).

model_name stays "default" so that the preset's base_* sizes decide; a MaxText model name in backend.model_name
is passed on with override_model_config=true (MaxText otherwise rejects overriding a named model's sizes).
Parallelism follows Megatron's convention (ep is carved out of dp) and is laid out on MaxText's mesh: nodes on
the DCN data axis, everything else on ICI axes. The keys MaxText takes as they are have their names in keys.py
(MAXTEXT_KEYS, read group by group). `backend.extra_args` is merged last (the user wins).
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from primus_hydra.backends.external import merge_extra_args, wants_checkpoints
from primus_hydra.backends.maxtext.gemma4 import gemma4_config
from primus_hydra.backends.maxtext.keys import MAXTEXT_KEYS
from primus_hydra.backends.translation_sections import translation_section
from primus_hydra.config.attention_math import attention_head_dim
from primus_hydra.config.layout import ParallelLayout
from primus_hydra.config.schema_model import GEMMA4_FAMILY

DECODER_BLOCKS = {"llama": "llama2", "mixtral": "mixtral", "deepseek": "deepseek", "qwen3": "qwen3"}  # by family
MLP_GATES = {"swiglu": "silu", "geglu": "gelu"}  # model.activation -> the first of MaxText's mlp_activations
ROPE_TYPES = {"none": "default", "linear": "default", "llama3": "llama3.1", "yarn": "yarn"}


def build_maxtext_config(cfg: DictConfig, run_dir: Path, layout: ParallelLayout) -> dict:
    config = {
        # outputs (checkpoints, tensorboard) land in <base_output_directory>/<run_name> = the run dir
        "run_name": run_dir.name,
        "base_output_directory": str(run_dir.parent),
        "model_name": cfg.backend.model_name or "default",
        "override_model_config": bool(cfg.backend.model_name),
        "hardware": "cpu" if cfg.platform.device == "cpu" else "gpu",
        **MAXTEXT_KEYS.translate(cfg.backend, "kernels"),
        "scan_layers": cfg.module.parallel.pp == 1,  # MaxText scans pipeline iterations instead of layers
    }
    config.update(model_config(cfg.model))
    config.update(training_config(cfg, layout))
    config.update(mesh_config(cfg, layout))
    config.update(data_checkpoint_logging_config(cfg))
    return merge_extra_args(config, cfg.backend.extra_args)


@translation_section
def model_config(model: DictConfig) -> dict:
    config = {
        # MaxText's qwen3 block is the dense layer: a Qwen3 MoE is its qwen3_moe block
        "decoder_block": "qwen3_moe" if model.family == "qwen3" and model.moe.num_experts else DECODER_BLOCKS.get(model.family, "llama2"),
        "base_emb_dim": model.hidden_size,
        "base_num_query_heads": model.num_attention_heads,
        "base_num_kv_heads": model.num_kv_heads,
        "base_mlp_dim": model.ffn_hidden_size,
        "base_num_decoder_layers": model.num_layers,
        "head_dim": attention_head_dim(model),
        "vocab_size": model.vocab_size,
        "mlp_activations": [MLP_GATES[str(model.activation)], "linear"],  # SwiGLU or GeGLU
        "normalization_layer_epsilon": model.norm_eps,
        "logits_via_embedding": model.tie_embeddings,
        "use_qk_norm": model.qk_norm,
        "rope_max_timescale": int(model.rope_theta),
        "rope_type": ROPE_TYPES[str(model.rope_scaling.type)],
        "dropout_rate": 0.0,
    }
    scaling = model.rope_scaling
    if config["rope_type"] == "yarn":
        config.update(
            max_position_embeddings=model.max_position_embeddings,
            original_max_position_embeddings=scaling.original_max_position_embeddings,
            rope_factor=scaling.factor, beta_fast=scaling.beta_fast, beta_slow=scaling.beta_slow, mscale=scaling.mscale,
        )
    elif str(scaling.type) == "linear":
        config["rope_linear_scaling_factor"] = scaling.factor
    if model.mla.enabled:
        mla = model.mla
        config.update(
            attention_type="mla", q_lora_rank=mla.q_lora_rank or 0, kv_lora_rank=mla.kv_lora_rank,
            qk_nope_head_dim=mla.qk_nope_head_dim, qk_rope_head_dim=mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim,
        )
    if model.moe.num_experts:
        config.update(moe_config(model.moe))
    if model.final_logit_softcap is not None:
        config["final_logits_soft_cap"] = model.final_logit_softcap
    if str(model.family) == GEMMA4_FAMILY:
        config.update(gemma4_config(model))
    return config


def moe_config(moe: DictConfig) -> dict:
    grouped = moe.router_num_groups > 1
    balancing = str(moe.load_balancing_type)
    return {
        "num_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "base_moe_mlp_dim": moe.ffn_hidden_size,
        "first_num_dense_layers": moe.first_dense_layers,
        "shared_experts": moe.shared_experts,
        "routed_scaling_factor": moe.router_topk_scaling_factor,
        "routed_score_func": str(moe.router_score_function),
        "routed_bias": moe.router_enable_expert_bias,
        "routed_bias_update_rate": moe.router_bias_update_rate,
        "n_routing_groups": moe.router_num_groups if grouped else -1,
        "topk_routing_group": moe.router_group_topk if grouped else -1,
        "norm_topk_prob": moe.router_norm_topk_prob,
        "capacity_factor": moe.capacity_factor if moe.capacity_factor is not None else -1.0,  # -1: dropless
        "load_balance_loss_weight": 0.0 if balancing == "none" else moe.aux_loss_coeff,
    }


@translation_section
def training_config(cfg: DictConfig, layout: ParallelLayout) -> dict:
    m = cfg.module
    schedule_steps = m.lr_decay_iters or m.train_iters
    warmup_fraction = m.warmup_iters / schedule_steps
    style = str(m.lr_decay_style)
    config = {
        # MaxText's batch is per device (all devices, model-parallel ones included) and may be fractional
        "per_device_batch_size": m.micro_batch_size * layout.dp / layout.world_size,
        "gradient_accumulation_steps": layout.grad_accum,
        **MAXTEXT_KEYS.translate(m, "training"),
        "opt_type": "adamw",
        "lr_schedule_type": "cosine",
        "learning_rate_final_fraction": m.min_lr / m.lr,
        "warmup_steps_fraction": warmup_fraction,
        "learning_rate_schedule_steps": schedule_steps,
        "dtype": "bfloat16" if str(m.precision) == "bf16" else "float32",
        "weight_dtype": "float32",
        "init_weights_seed": m.seed,
        "data_shuffle_seed": m.seed,
    }
    if style == "constant":  # a cosine from lr to lr
        config["learning_rate_final_fraction"] = 1.0
    elif style == "linear":  # warmup-stable-decay with no stable phase decays linearly right after warmup
        config.update(lr_schedule_type="wsd", wsd_decay_style="linear", wsd_decay_steps_fraction=1.0 - warmup_fraction)
    return config


@translation_section
def mesh_config(cfg: DictConfig, layout: ParallelLayout) -> dict:
    p, nnodes = cfg.module.parallel, cfg.launch.nnodes
    # the data (or fsdp) axis takes what the other axes leave of a node's devices: -1, MaxText's "the rest", so the
    # same config runs on another device count, as a Primus experiment's -1 does (ep is carved out of dp, as in
    # Megatron, and has its own mesh axis in MaxText)
    return {
        "dcn_data_parallelism": nnodes,
        "ici_data_parallelism": 1 if p.fsdp else -1,
        "ici_fsdp_parallelism": -1 if p.fsdp else 1,
        "ici_tensor_parallelism": p.tp,
        "ici_pipeline_parallelism": p.pp,
        "ici_context_parallelism": p.cp,
        "ici_expert_parallelism": p.ep,
    }


@translation_section
def data_checkpoint_logging_config(cfg: DictConfig) -> dict:
    m, ckpt = cfg.module, cfg.module.checkpoint
    mock = str(m.data.source) == "mock"
    config = {
        "dataset_type": "synthetic" if mock else "tfds",
        "enable_checkpointing": wants_checkpoints(cfg),
        "checkpoint_period": ckpt.interval or m.train_iters,
        "load_parameters_path": str(ckpt.load) if ckpt.load else "",
        "load_full_state_path": str(ckpt.resume) if ckpt.resume not in (None, "auto") else "",
        **MAXTEXT_KEYS.translate(m.log, "logging"),
        "enable_tensorboard": m.log.tensorboard,
    }
    if not mock and m.data.path:
        config["dataset_path"] = str(m.data.path)
    return config
