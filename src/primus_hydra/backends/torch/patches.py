"""Built-in patches of the torch backend."""
from __future__ import annotations

import dataclasses
import importlib.util
import logging

from primus_hydra.patches import PatchContext, register_patch

log = logging.getLogger(__name__)


@register_patch("torch.args.optional_libraries", backend="torch", phase="build_args", priority=20)
def logging_off_without_its_library(ctx: PatchContext) -> None:
    """TensorBoard events and the loss-curve PNG need optional packages (tensorboard, matplotlib): without one,
    that output is turned off with a warning instead of failing a finished run."""
    args = ctx.backend_args
    log_cfg = args.module.log
    changes = {}
    for key, package in (("tensorboard", "tensorboard"), ("plot", "matplotlib")):
        if getattr(log_cfg, key) and importlib.util.find_spec(package) is None:
            log.warning("module.log.%s=true but the %s package is missing: turned off (pip install %s)", key, package, package)
            changes[key] = False
    if changes:
        module = dataclasses.replace(args.module, log=dataclasses.replace(log_cfg, **changes))
        ctx.backend_args = dataclasses.replace(args, module=module)


@register_patch("torch.setup.intra_op_threads", backend="torch", phase="setup", priority=10)
def intra_op_threads(ctx: PatchContext) -> None:
    """backend.num_threads sets torch's intra-op thread count; unset leaves torch's own choice (OMP_NUM_THREADS or cores)."""
    threads = ctx.backend_args.num_threads
    if threads:
        import torch

        torch.set_num_threads(int(threads))


@register_patch("torch.setup.tf32_matmul", backend="torch", phase="setup", priority=20)
def tf32_matmul_on_gpu(ctx: PatchContext) -> None:
    """fp32 runs on GPUs use TF32 tensor cores for matmuls (what torchtitan and Megatron do by default)."""
    import torch

    if ctx.backend_args.module.precision == "fp32" and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
