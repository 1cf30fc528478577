"""Built-in Megatron patches (Primus's megatron.args.* and megatron.env.*), loaded when backend=megatron.

The build_args patches edit the translated arguments in ctx.backend_args; a key the user set in
backend.extra_args is never touched (the user wins). Switch one off with patches.enabled / PRIMUS_PATCHES.
"""
from __future__ import annotations

import os

from primus_hydra.backends.external import wants_checkpoints
from primus_hydra.backends.megatron import cpu_patches  # noqa: F401 - registers megatron.cpu.*
from primus_hydra.backends.megatron.datasets import text_prefix
from primus_hydra.config.paths import checkpoint_dir_of
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


@register_patch("megatron.args.layernorm_epsilon", backend="megatron", phase="build_args", backend_versions=[">=0.16"])
def layernorm_epsilon_since_0_16(ctx: PatchContext) -> None:
    """Since core_v0.16, Megatron's --norm-epsilon stores into `layernorm_epsilon` (before: `norm_epsilon`)."""
    args = ctx.backend_args
    if "norm_epsilon" in args and not _user_set(ctx, "layernorm_epsilon"):
        args["layernorm_epsilon"] = args.pop("norm_epsilon")


@register_patch(
    "megatron.args.checkpoint_path", backend="megatron", phase="build_args",
    condition=lambda ctx: wants_checkpoints(ctx.cfg),
)
def checkpoints_in_run_dir(ctx: PatchContext) -> None:
    """Checkpoints go to module.checkpoint.dir (<run_dir>/checkpoints unless set) unless extra_args.save says
    otherwise; resume=auto loads from the same folder."""
    args = ctx.backend_args
    if not _user_set(ctx, "save") and args.get("save") is None:
        args["save"] = checkpoint_dir_of(ctx.cfg, ctx.run_dir)
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


def _logs_to_wandb(cfg) -> bool:
    logger = cfg.get("logger")
    return logger is not None and "wandb" in [str(sink) for sink in logger.use]


@register_patch(
    "megatron.args.wandb_from_logger", backend="megatron", phase="build_args",
    condition=lambda ctx: _logs_to_wandb(ctx.cfg),
)
def wandb_from_logger(ctx: PatchContext) -> None:
    """logger=wandb reaches Megatron-LM's own W&B writer (backend.trainer=megatron_lm) as its --wandb-* flags:
    project, run name (the run dir's name by default), save dir (<run_dir>/wandb by default), entity when set;
    logger.wandb.mode as WANDB_MODE (the adapter's environment). The core trainer logs through the project's
    trackers and leaves them unused. A value set in backend.extra_args wins."""
    w = ctx.cfg.logger.wandb
    values = {"wandb_project": w.project, "wandb_exp_name": w.name or ctx.run_dir.name,
              "wandb_save_dir": w.dir or str(ctx.run_dir / "wandb")}
    if w.entity:
        values["wandb_entity"] = w.entity
    for key, value in values.items():
        if not _user_set(ctx, key) and ctx.backend_args.get(key) is None:
            ctx.backend_args[key] = value


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


@register_patch(
    "megatron.args.text_as_indexed", backend="megatron", phase="build_args",
    condition=lambda ctx: str(ctx.cfg.module.data.source) == "text",
)
def text_as_indexed_data(ctx: PatchContext) -> None:
    """module.data.source=text reaches Megatron-LM's pretrain() as the byte tokens backend=torch reads: the indexed
    dataset the trainer writes into the run dir before pretrain() (datasets.py), read with NullTokenizer (token
    ids, no tokenizer files)."""
    defaults = {"data_path": [str(text_prefix(ctx.run_dir))], "tokenizer_type": "NullTokenizer", "tokenizer_model": None}
    for key, value in defaults.items():
        if not _user_set(ctx, key):
            ctx.backend_args[key] = value


@register_patch("megatron.env.cuda_device_max_connections", backend="megatron", phase="setup")
def cuda_device_max_connections(ctx: PatchContext) -> None:
    """One hardware queue keeps TP communication ordered before compute; FSDP needs more than one
    (Megatron asserts it). setdefault: a value the user exported wins."""
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "8" if ctx.cfg.module.parallel.fsdp else "1")


def _local_norms_with_sequence_parallel(ctx: PatchContext) -> bool:
    from primus_hydra.backends.megatron.core_model import uses_transformer_engine

    args = ctx.backend_args
    return bool(args.get("sequence_parallel")) and not uses_transformer_engine(args, "cuda" if _has_cuda() else "cpu")


def _has_cuda() -> bool:
    import torch  # a worker-side condition: the setup phase runs in the worker

    return torch.cuda.is_available()


@register_patch("megatron.local_spec.sequence_parallel_norm", backend="megatron", phase="setup",
                backend_versions=["0.16.*"], condition=_local_norms_with_sequence_parallel)
def sequence_parallel_torch_norms(ctx: PatchContext) -> None:
    """megatron-core's local layer spec (torch RMSNorm, used without Transformer Engine) refuses sequence
    parallelism only because nothing marks its weights: with the sequence split across the TP group, each rank's
    norm gradient covers its own tokens. Marked `sequence_parallel`, finalize_model_grads all-reduces them over the
    TP group, which is what Transformer Engine's norms get."""
    from megatron.core.transformer import torch_norm

    from primus_hydra.patches.source_rewrite import rewrite_function

    rewrite_function(torch_norm.WrappedTorchNorm, "__new__", {
        'assert not config.sequence_parallel, f"sequence parallel not supported by torch LayerNorm"': "pass",
        "return norm_cls(normalized_shape=hidden_size, eps=eps)":
            "norm = norm_cls(normalized_shape=hidden_size, eps=eps)\n"
            "    for param in norm.parameters():\n"
            "        param.sequence_parallel = config.sequence_parallel\n"
            "    return norm",
    })


@register_patch("megatron.moe.router_gemm_without_te", backend="megatron", phase="setup", backend_versions=["0.16.*"],
                condition=lambda ctx: ctx.backend_args.get("num_experts"))
def router_gemm_without_te(ctx: PatchContext) -> None:
    """megatron-core 0.16's router linear tests `te_general_gemm is not None`, a name it defines only when
    Transformer Engine imports: without TE every MoE forward raises NameError. Define it as absent."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def _without_apex_or_te(ctx: PatchContext) -> bool:
    import importlib.util

    return importlib.util.find_spec("transformer_engine") is None and importlib.util.find_spec("apex") is None


@register_patch("megatron.optimizer.torch_adam_resume", backend="megatron", phase="setup", backend_versions=["0.16.*"],
                condition=_without_apex_or_te)
def torch_adam_resume(ctx: PatchContext) -> None:
    """Without Apex or Transformer Engine the distributed optimizer runs torch's Adam, whose per-parameter state
    also holds `step`, and resuming it goes wrong twice: the restored state gives every parameter the same `step`
    tensor, which torch's Adam then increments once per parameter in each step (every bias correction but the
    first is off: the curve leaves the uninterrupted one after the first resumed step), and copying a reshardable
    checkpoint's tensors asks them for a `step` they do not carry (KeyError). One step tensor per parameter, and
    copy the keys that were loaded."""
    from megatron.core.optimizer import distrib_optimizer

    from primus_hydra.patches.source_rewrite import rewrite_function

    rewrite_function(distrib_optimizer.DistributedOptimizer, "_set_main_param_and_optimizer_states",
                     {"for key in dst_tensors:": "for key in tensors:"})
    rewrite_function(distrib_optimizer.DistributedOptimizer, "load_state_dict",
                     {'s["step"] = step\n': 's["step"] = step.clone()\n'})
