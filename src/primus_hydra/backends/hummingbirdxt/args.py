"""The canonical config as HummingbirdXT's flat arguments (best effort).

HummingbirdXT post-trains video diffusion models (Wan 2.x) with its own config file format; only the keys that the
canonical LLM-centric config can fill are translated here, with the names of HummingbirdXT's default_config.yaml
and train/train.py as Primus's hummingbirdxt/wan22.yaml preset copies them. Everything diffusion-specific
(denoising_step_list, image_or_video_shape, generator_type, ...) comes through `backend.extra_args`, merged last.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from primus_hydra.backends.external import merge_extra_args, wants_checkpoints
from primus_hydra.config.paths import checkpoint_dir_of


def build_hummingbirdxt_args(cfg: DictConfig, run_dir: Path) -> dict:
    m, backend = cfg.module, cfg.backend
    model_id = backend.model_name_or_path
    args = {
        "config_name": cfg.model.name,
        "seed": m.seed,
        "lr": m.lr,
        "beta1": m.adam_beta1,
        "beta2": m.adam_beta2,
        "weight_decay": m.weight_decay,
        "batch_size": m.micro_batch_size,
        "mixed_precision": str(m.precision) == "bf16",
        "logdir": checkpoint_dir_of(cfg, run_dir),
        "no_save": not wants_checkpoints(cfg),
        "data_path": str(m.data.path) if m.data.path else None,
        "disable_wandb": True,  # the run dir holds the logs; enable wandb through extra_args
    }
    if model_id:  # one checkpoint plays generator, real and fake score (as in Primus's wan22 preset)
        args.update(generator_name=model_id, real_name=model_id, fake_name=model_id)
    return merge_extra_args(args, backend.extra_args)
