"""Built-in patches of the torch backend."""
from __future__ import annotations

import importlib.util
import logging

from primus_hydra.patches import PatchContext, register_patch

log = logging.getLogger(__name__)


@register_patch("torch.args.tensorboard_available", backend="torch", phase="build_args", priority=20)
def tensorboard_off_when_missing(ctx: PatchContext) -> None:
    """Turn TensorBoard logging off (with a warning) when the tensorboard package is not installed."""
    if ctx.backend_args["log"]["tensorboard"] and importlib.util.find_spec("tensorboard") is None:
        log.warning("module.log.tensorboard=true but the tensorboard package is missing: TensorBoard logging off")
        ctx.backend_args["log"]["tensorboard"] = False


@register_patch("torch.setup.intra_op_threads", backend="torch", phase="setup", priority=10)
def intra_op_threads(ctx: PatchContext) -> None:
    """backend.num_threads sets torch's intra-op thread count; unset leaves torch's own choice (OMP_NUM_THREADS or cores)."""
    threads = ctx.backend_args.get("num_threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))


@register_patch("torch.setup.tf32_matmul", backend="torch", phase="setup", priority=20)
def tf32_matmul_on_gpu(ctx: PatchContext) -> None:
    """fp32 runs on GPUs use TF32 tensor cores for matmuls (what torchtitan and Megatron do by default)."""
    import torch

    if ctx.backend_args["precision"] == "fp32" and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
