"""Built-in Megatron patches (Primus's megatron.args.* and megatron.env.*), loaded when backend=megatron.

The build_args patches edit the translated arguments in ctx.backend_args; a key the user set in
backend.extra_args is never touched (the user wins). Switch one off with patches.enabled / PRIMUS_PATCHES.
"""
from __future__ import annotations

import os

from primus_hydra.backends.external import wants_checkpoints
from primus_hydra.patches.registry import PatchContext, register_patch


def _user_set(ctx: PatchContext, key: str) -> bool:
    return key in ctx.cfg.backend.extra_args


@register_patch(
    "megatron.args.sequence_parallel_tp1", backend="megatron", phase="build_args",
    condition=lambda ctx: ctx.backend_args.get("tensor_model_parallel_size", 1) == 1,
)
def sequence_parallel_off_without_tp(ctx: PatchContext) -> None:
    """Sequence parallelism splits along the TP group: with tp=1 there is nothing to split."""
    if not _user_set(ctx, "sequence_parallel"):
        ctx.backend_args["sequence_parallel"] = False


@register_patch(
    "megatron.args.checkpoint_path", backend="megatron", phase="build_args",
    condition=lambda ctx: wants_checkpoints(ctx.cfg),
)
def checkpoints_in_run_dir(ctx: PatchContext) -> None:
    """Checkpoints go to <run_dir>/checkpoints unless module.checkpoint.dir or extra_args.save says otherwise;
    resume=auto loads from the same folder."""
    args = ctx.backend_args
    if not _user_set(ctx, "save") and args.get("save") is None:
        args["save"] = str(ctx.run_dir / "checkpoints")
    if not _user_set(ctx, "load") and args.get("load") is None and ctx.cfg.module.checkpoint.resume == "auto":
        args["load"] = args["save"]


@register_patch(
    "megatron.args.tensorboard_path", backend="megatron", phase="build_args",
    condition=lambda ctx: bool(ctx.cfg.module.log.tensorboard),
)
def tensorboard_in_run_dir(ctx: PatchContext) -> None:
    """TensorBoard events go to <run_dir>/tensorboard next to the run's other outputs."""
    if not _user_set(ctx, "tensorboard_dir") and ctx.backend_args.get("tensorboard_dir") is None:
        ctx.backend_args["tensorboard_dir"] = str(ctx.run_dir / "tensorboard")


@register_patch(
    "megatron.args.mock_data", backend="megatron", phase="build_args",
    condition=lambda ctx: str(ctx.cfg.module.data.source) == "mock",
)
def mock_data_without_tokenizer(ctx: PatchContext) -> None:
    """Mock data needs no tokenizer files: NullTokenizer over model.vocab_size, and no data paths
    (Megatron accepts exactly one data source)."""
    defaults = {
        "mock_data": True,
        "tokenizer_type": "NullTokenizer",
        "tokenizer_model": None,
        "data_path": None,
        "train_data_path": None,
        "valid_data_path": None,
        "test_data_path": None,
    }
    for key, value in defaults.items():
        if not _user_set(ctx, key):
            ctx.backend_args[key] = value


@register_patch("megatron.env.cuda_device_max_connections", backend="megatron", phase="setup")
def cuda_device_max_connections(ctx: PatchContext) -> None:
    """One hardware queue keeps TP communication ordered before compute; FSDP needs more than one
    (Megatron asserts it). setdefault: a value the user exported wins."""
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "8" if ctx.cfg.module.parallel.fsdp else "1")
