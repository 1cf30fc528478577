"""The canonical config as a torchtitan JobConfig (torchtitan/config/job_config.py, 0.2-era names: checkpoint.enable,
compile.enable, lr_scheduler.min_lr_factor, debug.seed, model.hf_assets_path), plus a `model_args` section.

torchtitan picks an architecture by model.name + model.flavor from its own registry, so `model_args` spells out
the preset's architecture in torchtitan's TransformerModelArgs / DeepSeekV3ModelArgs names; the trainer will
apply it over the flavor (Primus's torchtitan.model_override does the same) so that the preset, not the flavor, decides.
The keys torchtitan takes as they are have their names in keys.py (TORCHTITAN_KEYS, read section by section).
`backend.extra_args` is merged last, section by section (the user wins).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.backends.external import merge_extra_args, size_tag
from primus_hydra.backends.torchtitan.byte_tokenizer import TOKENIZER_DIR
from primus_hydra.backends.torchtitan.keys import TORCHTITAN_KEYS
from primus_hydra.backends.translation_sections import translation_section
from primus_hydra.config.layout import ParallelLayout

TORCHTITAN_MODEL_NAMES = {"llama": "llama3", "deepseek": "deepseek_v3", "qwen3": "qwen3", "llama4": "llama4",
                          "gpt_oss": "gpt_oss"}  # by family
# torchtitan's deepseek_v3 "16B" flavor is DeepSeek-V2-Lite's shape, "671B" DeepSeek-V3's
KNOWN_FLAVORS = {"deepseek_v2_lite": "16B", "deepseek_v3": "671B", "llama4_17bx16e": "17bx16e",
                 "llama4_17bx128e": "17bx128e", "gpt_oss_20b": "20b", "gpt_oss_120b": "120b"}
DECAY_TYPES = {"cosine": "cosine", "linear": "linear", "constant": "linear"}  # constant: see lr_scheduler_section
MULTIPLE_OF_CANDIDATES = (1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1)


def build_torchtitan_job_config(cfg: DictConfig, run_dir, layout: ParallelLayout) -> dict:
    m, backend = cfg.module, cfg.backend
    job = {
        "job": {"dump_folder": str(run_dir), "description": f"{cfg.model.name} {str(m.stage)} (primus-hydra)"},
        "model": {
            "name": TORCHTITAN_MODEL_NAMES.get(cfg.model.family, cfg.model.family),
            "flavor": backend.flavor or KNOWN_FLAVORS.get(cfg.model.name) or size_tag(cfg.model.name) or cfg.model.name,
        },
        "optimizer": {"name": "AdamW", **TORCHTITAN_KEYS.translate(m, "optimizer")},
        "lr_scheduler": lr_scheduler_section(m),
        "training": training_section(cfg),
        "parallelism": parallelism_section(cfg, layout),
        "checkpoint": checkpoint_section(cfg),
        "activation_checkpoint": TORCHTITAN_KEYS.translate(backend, "activation_checkpoint"),
        "compile": {"enable": backend.compile or m.compile},
        # every step's metrics reach the project's metrics.jsonl / TensorBoard (module.log.interval: the console)
        # (its own console line per step stays, plain: the run logs are files)
        "metrics": {"log_freq": 1, "enable_tensorboard": False, "disable_color_printing": True},
        "debug": TORCHTITAN_KEYS.translate(m, "debug"),
        "model_args": model_args_section(cfg.model, m.seq_length),
    }
    # the tokenizer of the data (module.data.tokenizer), else the user's, else the byte-level one the trainer writes
    # into the run dir (byte_tokenizer.py)
    tokenizer = m.data.get("tokenizer") or backend.tokenizer_path
    job["model"]["hf_assets_path"] = tokenizer or str(Path(run_dir or ".") / TOKENIZER_DIR)
    return merge_extra_args(job, backend.extra_args)


@translation_section
def lr_scheduler_section(m: DictConfig) -> dict:
    style = str(m.lr_decay_style)
    section = {
        **TORCHTITAN_KEYS.translate(m, "lr_scheduler"),  # total_steps null: training.steps
        "decay_type": DECAY_TYPES[style],
        "min_lr_factor": m.min_lr / m.lr,
    }
    if style == "constant":  # warmup-stable-decay with an empty decay phase is a constant schedule
        section["decay_ratio"] = 0.0
    return section


@translation_section
def training_section(cfg: DictConfig) -> dict:
    m, data = cfg.module, cfg.module.data
    return {
        # torchtitan's local batch is one micro-batch; it accumulates up to global_batch_size
        **TORCHTITAN_KEYS.translate(m, "training"),
        "global_batch_size": m.global_batch_size,
        "mixed_precision_param": "bfloat16" if str(m.precision) == "bf16" else "float32",
        # the trainer's dataloader is the project's own (module.data.source): these two only name it
        "dataset": f"primus_hydra_{data.source}",
        "dataset_path": str(data.path) if data.path else None,
    }


@translation_section
def parallelism_section(cfg: DictConfig, layout: ParallelLayout) -> dict:
    p, dp = cfg.module.parallel, layout.dp
    return {
        "data_parallel_replicate_degree": 1 if p.fsdp else dp,
        "data_parallel_shard_degree": dp if p.fsdp else 1,
        **TORCHTITAN_KEYS.translate(p, "parallelism"),
    }


@translation_section
def checkpoint_section(cfg: DictConfig) -> dict:
    """torchtitan's own checkpointer stays off: the trainer writes its DCP states into the project's atomic step
    folders (module.checkpoint.*), where module.checkpoint.resume finds them."""
    return {"enable": False}


# the canonical model's attention: causal over the whole sequence (torchtitan's flex flavors mask per document
# at its tokenizer's EOS); backend.extra_args.model_args.attn_type=flex picks flex on GPUs
ATTENTION = {"attn_type": "sdpa", "attn_mask_type": "causal"}


# gpt_oss attends through block masks only (a window on every other layer): flex attention, on GPUs its compiled
# kernel, on the CPU the torchtitan.cpu.flex_attention patch's
GPT_OSS_ATTENTION = {"attn_type": "flex", "attn_mask_type": "causal"}


@translation_section
def model_args_section(model: DictConfig, seq_length: int) -> dict:
    if model.family == "gpt_oss":
        return {**_gpt_oss_model_args(model, seq_length), **GPT_OSS_ATTENTION}
    if model.family == "qwen3":
        return {**_qwen3_model_args(model, seq_length), **ATTENTION}
    if model.family == "llama4":
        return {**_llama4_model_args(model, seq_length), **ATTENTION}
    if model.family == "deepseek" or model.mla.enabled or model.moe.num_experts:
        return {**_deepseek_v3_model_args(model, seq_length), **ATTENTION}
    multiple_of, multiplier = llama_ffn_rounding(model.hidden_size, model.ffn_hidden_size)
    args = {
        "dim": model.hidden_size,
        "n_layers": model.num_layers,
        "n_heads": model.num_attention_heads,
        "n_kv_heads": model.num_kv_heads,
        "vocab_size": model.vocab_size,
        "multiple_of": multiple_of,
        "ffn_dim_multiplier": multiplier,
        "norm_eps": model.norm_eps,
        "rope_theta": model.rope_theta,
        "max_seq_len": seq_length,
        **ATTENTION,
    }
    # torchtitan's llama3 always applies Llama-3.1 scaling: a factor of 1 leaves every frequency as it is
    args["rope_scaling_args"] = _llama_rope_scaling(model) or {"scaling_factor": 1.0}
    return args


def _llama_rope_scaling(model: DictConfig) -> Optional[dict]:
    scaling = model.rope_scaling
    if str(scaling.type) != "llama3":
        return None
    return {"scaling_factor": scaling.factor, "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_position_embeddings}


def _llama4_model_args(model: DictConfig, seq_length: int) -> dict:
    """torchtitan's llama4 TransformerModelArgs: the dense width from (multiple_of, ffn_dim_multiplier) as llama3's,
    the experts' from the same pair, divided among the experts a token meets (auto_scale_hidden_dim) or not."""
    moe = model.moe
    multiple_of, multiplier = llama_ffn_rounding(model.hidden_size, model.ffn_hidden_size)
    auto_scale = llama4_expert_widths(model.hidden_size, multiple_of, multiplier, moe.top_k + moe.shared_experts)[True] \
        == moe.ffn_hidden_size
    return {
        "dim": model.hidden_size, "n_layers": model.num_layers, "n_heads": model.num_attention_heads,
        "n_kv_heads": model.num_kv_heads, "vocab_size": model.vocab_size, "multiple_of": multiple_of,
        "ffn_dim_multiplier": multiplier, "norm_eps": model.norm_eps, "rope_theta": model.rope_theta,
        "rope_scaling_args": _llama_rope_scaling(model), "max_seq_len": seq_length, "every_n_layers_nope": None,
        "moe_args": moe_args_section(moe), "interleave_moe_layer_step": moe.interleave_step,
        "auto_scale_hidden_dim": auto_scale,
    }


def llama4_expert_widths(dim: int, multiple_of: int, ffn_dim_multiplier: Optional[float],
                         experts_per_token: int) -> dict[bool, int]:
    """torchtitan's llama4 expert width by auto_scale_hidden_dim: the dense width before rounding, divided among the
    experts a token meets (top_k + shared) or not, rounded up to multiple_of."""
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return {auto_scale: int(hidden / denominator) + -int(hidden / denominator) % multiple_of
            for auto_scale, denominator in ((True, experts_per_token), (False, 1))}


def _qwen3_model_args(model: DictConfig, seq_length: int) -> dict:
    """torchtitan's Qwen3ModelArgs: the head width and the FFN width are given, not derived."""
    return {
        "dim": model.hidden_size,
        "n_layers": model.num_layers,
        "n_heads": model.num_attention_heads,
        "n_kv_heads": model.num_kv_heads,
        "head_dim": model.head_dim or model.hidden_size // model.num_attention_heads,
        "hidden_dim": model.ffn_hidden_size,
        "vocab_size": model.vocab_size,
        "norm_eps": model.norm_eps,
        "rope_theta": model.rope_theta,
        "qk_norm": model.qk_norm,
        "max_seq_len": seq_length,
        "enable_weight_tying": model.tie_embeddings,
        **({"moe_enabled": True, "moe_inter_dim": model.moe.ffn_hidden_size, "moe_args": moe_args_section(model.moe)}
           if model.moe.num_experts else {}),
    }


def _gpt_oss_model_args(model: DictConfig, seq_length: int) -> dict:
    """torchtitan's GptOssModelArgs: every layer MoE; sinks, biases, the window on even layers and the clamped
    SwiGLU are its fixed architecture (the adapter refuses a model without them), the sizes are the preset's."""
    scaling = model.rope_scaling
    yarn = str(scaling.type) == "yarn"
    return {
        "dim": model.hidden_size, "n_layers": model.num_layers, "n_heads": model.num_attention_heads,
        "n_kv_heads": model.num_kv_heads, "head_dim": model.head_dim or model.hidden_size // model.num_attention_heads,
        "vocab_size": model.vocab_size, "norm_eps": model.norm_eps, "max_seq_len": seq_length,
        "moe_inter_dim": model.moe.ffn_hidden_size, "moe_args": moe_args_section(model.moe),
        "swiglu_limit": model.swiglu_limit, "sliding_window_size": model.sliding_window,
        "rope_theta": model.rope_theta, "rope_factor": scaling.factor if yarn else 1.0,
        "original_seq_len": scaling.original_max_position_embeddings,
        # YaRN's ramp: torchtitan's ntk_alpha bounds the high frequencies (beta_slow), ntk_beta the low (beta_fast)
        "ntk_alpha": scaling.beta_slow, "ntk_beta": scaling.beta_fast,
    }


def _deepseek_v3_model_args(model: DictConfig, seq_length: int) -> dict:
    moe, mla, scaling = model.moe, model.mla, model.rope_scaling
    return {
        "dim": model.hidden_size,
        "inter_dim": model.ffn_hidden_size,
        "moe_inter_dim": moe.ffn_hidden_size,
        "n_layers": model.num_layers,
        "n_dense_layers": moe.first_dense_layers,
        "n_heads": model.num_attention_heads,
        "norm_eps": model.norm_eps,
        "vocab_size": model.vocab_size,
        "max_seq_len": seq_length,
        "moe_args": moe_args_section(moe),
        "q_lora_rank": mla.q_lora_rank or 0,  # torchtitan: 0 = full-rank queries
        "kv_lora_rank": mla.kv_lora_rank,
        "qk_nope_head_dim": mla.qk_nope_head_dim,
        "qk_rope_head_dim": mla.qk_rope_head_dim,
        "v_head_dim": mla.v_head_dim,
        "rope_theta": model.rope_theta,
        "rope_factor": scaling.factor,
        "original_seq_len": scaling.original_max_position_embeddings,
        "beta_fast": int(scaling.beta_fast),
        "beta_slow": int(scaling.beta_slow),
        # the softmax scale's YaRN factor (torchtitan: 0.1 * mscale * ln(rope_factor) + 1; Hugging Face's
        # DeepSeek configs: mscale_all_dim)
        "mscale": scaling.mscale_all_dim or scaling.mscale,
    }


def moe_args_section(moe: DictConfig) -> dict:
    """torchtitan's MoEArgs (the scores weight the experts' outputs, or their inputs: Llama 4)."""
    return {
        "num_experts": moe.num_experts,
        "num_shared_experts": moe.shared_experts,
        "top_k": moe.top_k,
        "score_func": str(moe.router_score_function),
        "route_norm": moe.router_norm_topk_prob and moe.top_k > 1,  # one expert's weight stays its score
        "route_scale": moe.router_topk_scaling_factor,
        "score_before_experts": bool(moe.score_before_experts),
        # aux-loss-free balancing: the expert bias and its update rate
        "load_balance_coeff": (moe.router_bias_update_rate or None) if moe.router_enable_expert_bias else None,
        # node-limited routing (0.2.0 named these n_expert_groups / n_limited_groups: key_moves.py)
        "num_expert_groups": moe.router_num_groups if moe.router_num_groups > 1 else None,
        "num_limited_groups": moe.router_group_topk if moe.router_num_groups > 1 else None,
        # a learned bias on the router's logits (gpt_oss's gate), named only when set (0.2.0 has no such field)
        **({"gate_bias": True} if moe.router_bias else {}),
    }


def llama_ffn_hidden_dim(dim: int, multiple_of: int, ffn_dim_multiplier: Optional[float]) -> int:
    """torchtitan's (and Meta's reference) Llama FeedForward width: 2/3 of 4*dim, scaled, rounded up."""
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def llama_ffn_rounding(dim: int, ffn_hidden_size: int) -> tuple[int, Optional[float]]:
    """(multiple_of, ffn_dim_multiplier) that reproduce ffn_hidden_size exactly, preferring the largest multiple_of
    and the shortest multiplier (Llama 3 8B: 1024 and 1.3)."""
    base = int(2 * 4 * dim / 3)
    for multiple_of in (m for m in MULTIPLE_OF_CANDIDATES if ffn_hidden_size % m == 0):
        # the last candidate lands inside [ffn, ffn + 1) before int() truncates, whatever the float rounding
        candidates = [None] + [round(ffn_hidden_size / base, digits) for digits in range(1, 7)]
        candidates.append((ffn_hidden_size + 0.5) / base)
        for multiplier in candidates:
            if llama_ffn_hidden_dim(dim, multiple_of, multiplier) == ffn_hidden_size:
                return multiple_of, multiplier
    raise ValueError(f"model.ffn_hidden_size={ffn_hidden_size}: no (multiple_of, ffn_dim_multiplier) reproduces it")
