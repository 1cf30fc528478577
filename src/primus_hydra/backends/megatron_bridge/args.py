"""The canonical config as Megatron-Bridge ConfigContainer sections (best effort).

Megatron-Bridge builds the model from a recipe (megatron.bridge.recipes.<family>.<model>) or a Hugging Face
checkpoint, so the `recipe` section names one and the other sections override the recipe's training settings
with the canonical values: train (TrainingConfig), optimizer (Megatron Core OptimizerConfig), scheduler,
checkpoint, logger, rng, tokenizer, dataset, and the model provider's architecture and parallel layout. Field names follow
megatron/training/config/training_config.py and megatron/bridge/training/config.py; `backend.extra_args` is
merged last, section by section (the user wins).
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from primus_hydra.backends.common.hf_folder import is_hf_folder
from primus_hydra.backends.external import merge_extra_args, wants_checkpoints
from primus_hydra.backends.megatron.args import mla_args, model_args, moe_args, optimizer_args, scheduler_args
from primus_hydra.backends.megatron.hybrid_args import architecture_variant_args
from primus_hydra.backends.megatron_bridge.keys import MEGATRON_BRIDGE_KEYS
from primus_hydra.config.paths import checkpoint_dir_of

# what the translation cannot give Bridge (refused before launch by the adapter, guarded in the trainer)
NO_LATENT_ATTENTION = ("backend=megatron_bridge: multi-latent attention (model.mla.enabled) takes Bridge's DeepSeek "
                       "providers, which this project does not build yet; use backend=megatron")
# multi-latent attention inside a hybrid stack: Primus's own HybridStack spec (Zebra-Llama), not a library's
NO_HYBRID_LATENT_ATTENTION = (
    "backend=megatron_bridge: multi-latent attention in a hybrid layer pattern (model.mla.enabled with "
    "model.hybrid.layer_pattern, Zebra-Llama's layers) is Primus's own HybridStack spec, which neither Megatron-Bridge "
    "nor megatron-core ships; task.dry_run=true exports its arguments")


def default_recipe(model: DictConfig) -> str:
    """Bridge's recipe modules drop the dot of a version: llama3.1_8b -> llama.llama31_8b."""
    return f"{model.family}.{model.name.replace('.', '')}"


def build_megatron_bridge_config(cfg: DictConfig, run_dir: Path) -> dict:
    m, backend, p, ckpt = cfg.module, cfg.backend, cfg.module.parallel, cfg.module.checkpoint
    mock = str(m.data.source) == "mock"
    save_dir = checkpoint_dir_of(cfg, run_dir)
    config = {
        "recipe": {
            "name": backend.recipe or default_recipe(cfg.model),
            "hf_model_id": backend.hf_model_id,
            "stage": str(m.stage),
        },
        "model": {
            # the architecture in Megatron's argument names: the model provider's TransformerConfig fields are made
            # from them as megatron-core's trainer makes its own (megatron/core_config.py)
            **model_args(cfg.model), **moe_args(cfg.model), **mla_args(cfg.model),
            **architecture_variant_args(cfg.model),  # the norm, NoPE, a hybrid pattern (MambaModelProvider)
            **MEGATRON_BRIDGE_KEYS.translate(p, "parallel"),
            "sequence_parallel": p.sequence_parallel and p.tp > 1,  # sequence parallelism splits along TP
            **MEGATRON_BRIDGE_KEYS.translate(m, "sequence"),
        },
        "train": {
            **MEGATRON_BRIDGE_KEYS.translate(m, "train"),
            # Bridge evaluates every eval_interval steps; eval_iters=0 turns it off
            "eval_interval": m.eval_interval or m.train_iters,
            "eval_iters": m.eval_iters if m.eval_interval else 0,
        },
        "optimizer": {**optimizer_args(m), "use_distributed_optimizer": not p.fsdp},
        # Bridge's scheduler also schedules the weight decay: constant at module.weight_decay
        "scheduler": {**scheduler_args(m), "start_weight_decay": m.weight_decay, "end_weight_decay": m.weight_decay},
        "checkpoint": {
            "save": save_dir if wants_checkpoints(cfg) else None,
            "save_interval": ckpt.interval or m.train_iters,
            # resume: the full state (optimizer, step); auto resumes from the run's own folder when it has one
            "load": save_dir if ckpt.resume == "auto" else (str(ckpt.resume) if ckpt.resume else None),
            # weights to fine-tune from, in Megatron's layout (an HF folder is read by AutoBridge, see trainer.py)
            "pretrained_checkpoint": str(ckpt.load) if ckpt.load and not is_hf_folder(Path(str(ckpt.load))) else None,
        },
        "logger": {
            **MEGATRON_BRIDGE_KEYS.translate(m.log, "logger"),
            "tensorboard_dir": str(run_dir / "tensorboard") if m.log.tensorboard else None,
        },
        "rng": MEGATRON_BRIDGE_KEYS.translate(m, "rng"),
        "tokenizer": {
            "tokenizer_type": "NullTokenizer" if mock else "HuggingFaceTokenizer",
            "tokenizer_model": None if mock else backend.hf_model_id,
            "vocab_size": cfg.model.vocab_size,
        },
        "dataset": {
            "seq_length": m.seq_length,
            "data_path": None if mock else (str(m.data.path) if m.data.path else None),
        },
        # Megatron-Bridge's LoRA (megatron.bridge.peft.lora.LoRA) fields; null: every weight trains
        "peft": {"method": "lora", "target_modules": list(m.peft.target_modules), "dim": m.peft.rank,
                 "alpha": m.peft.alpha, "dropout": m.peft.dropout} if m.peft.method else None,
    }
    return merge_extra_args(config, backend.extra_args)
