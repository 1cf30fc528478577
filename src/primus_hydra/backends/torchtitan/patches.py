"""backend=torchtitan's patches. torchtitan.cpu.*: torchtitan on the CPU, so that a torchtitan model is trained and
debugged without a GPU. Written for, and gated to, the torchtitan releases in CPU_PATCH_VERSIONS (enabled only when
the run's device is the CPU); with another release a CPU run stops before the model is built (cpu_support_failure).

torchtitan 0.2.x picks its device type once, at import (`tools/utils.py`: "cuda" when no accelerator is found), and
five modules keep that choice under their own names; its memory monitor asks torch.cpu for CUDA's memory statistics.

torchtitan.args.keys_*: keys torchtitan moved between releases reach the installed one under its names (key_moves.py).
"""
from __future__ import annotations

import importlib
import os
import resource
import types
from typing import Optional

from primus_hydra.backends.torchtitan.key_moves import MOVED_IN, MOVES_OF_0_2_1, move_keys, reversed_moves
from primus_hydra.patches.registry import PatchContext, register_patch, runs_on_cpu
from primus_hydra.patches.versions import cpu_patches_failure

CPU_PATCH_VERSIONS = ("0.2.*",)
_DEVICE_HOLDERS = ("torchtitan.tools.utils", "torchtitan.components.metrics", "torchtitan.distributed.utils",
                   "torchtitan.distributed.parallel_dims", "torchtitan.tools.profiling")

_PARALLELIZE_MODULES = tuple(f"torchtitan.models.{name}.infra.parallelize"
                             for name in ("llama3", "llama4", "qwen3", "deepseek_v3", "gpt_oss"))


def cpu_support_failure(version: Optional[str]) -> Optional[str]:
    return cpu_patches_failure("torchtitan", "torchtitan", version, CPU_PATCH_VERSIONS, "torchtitan==0.2.2")


@register_patch("torchtitan.cpu.device_type", backend="torchtitan", phase="setup", priority=10,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def device_type_cpu(ctx: PatchContext) -> None:
    """torchtitan's device type and module are the CPU's (torch.cpu), in every module that holds them."""
    import torch

    for name in _DEVICE_HOLDERS:
        module = importlib.import_module(name)
        if hasattr(module, "device_type"):
            module.device_type = "cpu"
        if hasattr(module, "device_module"):
            module.device_module = torch.cpu


class CPUMemoryMonitor:
    """torchtitan's DeviceMemoryMonitor for the CPU: the process's peak resident memory against the host's RAM."""

    def __init__(self, device: str = "cpu") -> None:
        import torch

        self.device = torch.device("cpu")
        self.device_name = "cpu"
        self.device_index = 0
        self.device_capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.device_capacity_gib = self.device_capacity / 2**30

    def get_peak_stats(self):
        from torchtitan.components.metrics import DeviceMemStats

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        gib, pct = peak / 2**30, 100 * peak / self.device_capacity
        return DeviceMemStats(gib, pct, gib, pct, 0, 0)

    def reset_peak_stats(self) -> None:
        """The kernel keeps one peak per process: nothing to reset."""


@register_patch("torchtitan.cpu.memory_monitor", backend="torchtitan", phase="setup", priority=11,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def memory_monitor_cpu(ctx: PatchContext) -> None:
    """The memory line of torchtitan's metrics reads the process's peak RSS (torch.cpu has no memory_stats)."""
    metrics = importlib.import_module("torchtitan.components.metrics")
    metrics.DeviceMemoryMonitor = CPUMemoryMonitor


@register_patch("torchtitan.cpu.fsdp_sum_reduction", backend="torchtitan", phase="setup", priority=12,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def fsdp_sum_reduction_cpu(ctx: PatchContext) -> None:
    """FSDP's gradient reduce-scatter as a plain SUM: torchtitan sets a divide factor of 1 (it normalizes by the
    global token count itself), which FSDP sends as ReduceOp.PREMUL_SUM(1), an op gloo does not have."""
    from torch.distributed.fsdp import FSDPModule

    disable_division = importlib.import_module(_PARALLELIZE_MODULES[0]).disable_fsdp_gradient_division

    def disable_division_and_sum(model) -> None:
        disable_division(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)

    _replace_everywhere("disable_fsdp_gradient_division", disable_division, disable_division_and_sum)


def _sum_allreduce(process_group, bucket):
    import torch.distributed as dist

    work = dist.all_reduce(bucket.buffer(), group=process_group, async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


@register_patch("torchtitan.ddp.sum_gradients", backend="torchtitan", phase="setup", backend_versions=["0.2.*"])
def ddp_sum_gradients(ctx: PatchContext) -> None:
    """Data-parallel replicas (dp_replicate) sum their gradients instead of averaging them: torchtitan 0.2 already
    divides the loss by the global token count, so DDP's average divided the gradients by dp twice (a gradient norm
    dp times too small, clipping at the wrong scale; torchtitan PR #2323). Curves then match FSDP and one process."""
    apply_ddp = importlib.import_module(_PARALLELIZE_MODULES[0]).apply_ddp

    def apply_ddp_summing(model, dp_mesh, *args, **kwargs):
        result = apply_ddp(model, dp_mesh, *args, **kwargs)
        model.register_comm_hook(dp_mesh.get_group(), _sum_allreduce)
        return result

    _replace_everywhere("apply_ddp", apply_ddp, apply_ddp_summing)


def _replace_everywhere(name: str, original, replacement) -> None:
    """llama3's parallelize functions are imported by name into the other models' (llama4's apply_fsdp calls its own
    copy of disable_fsdp_gradient_division; qwen3 and deepseek_v3 import apply_ddp): each copy is replaced."""
    for module_name in _PARALLELIZE_MODULES:
        module = importlib.import_module(module_name)
        if getattr(module, name, None) is original:
            setattr(module, name, replacement)


class _TorchWithIntegerHistc(types.ModuleType):
    """`torch` as torchtitan's MoE module sees it: the same, but histc counts integer tensors on the CPU too."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str):
        import torch

        return getattr(torch, name)

    @staticmethod
    def histc(input, bins: int = 100, min: float = 0, max: float = 0, *, out=None):  # noqa: A002 - torch's names
        import torch

        if input.device.type != "cpu" or input.is_floating_point():
            return torch.histc(input, bins=bins, min=min, max=max, out=out)
        return torch.histc(input.float(), bins=bins, min=min, max=max).to(input.dtype)  # exact below 2**24 tokens


@register_patch("torchtitan.cpu.moe_histc", backend="torchtitan", phase="setup", priority=15,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def moe_histc_cpu(ctx: PatchContext) -> None:
    """torchtitan's MoE router counts tokens per expert with torch.histc on integer expert ids, which torch's CPU
    kernel does not take ("histogram_cpu" not implemented for 'Long'): counted as floats there."""
    moe = importlib.import_module("torchtitan.models.moe.moe")
    if not isinstance(moe.torch, _TorchWithIntegerHistc):
        moe.torch = _TorchWithIntegerHistc()


def _sum_gradient_over(group):
    """Identity forward; the gradient summed over `group` backward (Megatron's "copy to tensor-parallel region")."""
    import torch
    import torch.distributed as dist

    class SumGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            grad = grad.contiguous()
            dist.all_reduce(grad, group=group)
            return grad

    return SumGradient.apply


@register_patch("torchtitan.moe.tp_router_gradients", backend="torchtitan", phase="setup", priority=16,
                backend_versions=["0.2.*"])
def tp_router_gradients(ctx: PatchContext) -> None:
    """Tensor-parallel MoE with the scores weighting the experts' outputs (score_before_experts=false: DeepSeek's
    routing, every torchtitan DeepSeek flavor): each tp rank holds a partial sum of the routed output, so the scores'
    gradient, and through it the router's, was a partial sum treated as the whole (measured: the step-1 grad norm
    off by 6e-5 and the curve by 5e-4 after 3 steps on 2 ranks). The scores' gradient is summed over tp. llama4's
    function (which qwen3 and deepseek_v3 import) and gpt_oss's own are both wrapped."""
    for owner in ("llama4", "gpt_oss"):
        apply_moe_ep_tp = importlib.import_module(f"torchtitan.models.{owner}.infra.parallelize").apply_moe_ep_tp
        _replace_everywhere("apply_moe_ep_tp", apply_moe_ep_tp, _summing_score_gradients(apply_moe_ep_tp))


def _summing_score_gradients(apply_moe_ep_tp):
    def apply_moe_ep_tp_summing_score_gradients(model, tp_mesh, ep_mesh, *args, **kwargs):
        result = apply_moe_ep_tp(model, tp_mesh, ep_mesh, *args, **kwargs)
        if tp_mesh is None or ep_mesh is not None:  # experts tensor-parallel over tp only
            return result
        sum_gradient = _sum_gradient_over(tp_mesh.get_group())

        def full_score_gradients(router, inputs, output):
            top_scores, *rest = output
            return (sum_gradient(top_scores), *rest)

        for block in model.layers.values():
            if getattr(block, "moe_enabled", False) and not block.moe.score_before_experts:
                block.moe.router.register_forward_hook(full_score_gradients)
        return result

    return apply_moe_ep_tp_summing_score_gradients


@register_patch("torchtitan.cpu.peak_flops", backend="torchtitan", phase="setup", priority=13,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def peak_flops_cpu(ctx: PatchContext) -> None:
    """torchtitan's MFU denominator on the CPU: this CPU's measured fp32 matmul peak (as backend=torch's), instead of
    an A100's after a failed lspci."""
    import torch

    from primus_hydra.backends.common.metrics import cpu_matmul_peak_tflops

    utils = importlib.import_module("torchtitan.tools.utils")
    utils.get_peak_flops = lambda device_name: cpu_matmul_peak_tflops(torch.float32) * 1e12


@register_patch("torchtitan.cpu.pg_timeouts", backend="torchtitan", phase="setup", priority=14,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def pg_timeouts_cpu(ctx: PatchContext) -> None:
    """torchtitan's own loop shortens the process groups' timeouts after step 1 behind a barrier with
    device_ids=[<a CUDA index>], which gloo refuses: the same barrier and timeouts without a device."""
    import torch.distributed as dist

    utils = importlib.import_module("torchtitan.distributed.utils")

    def set_pg_timeouts(timeout, parallel_dims) -> None:
        dist.barrier()
        groups = [mesh.get_group() for mesh in parallel_dims.get_all_one_dimensional_meshes().values()] + [None]
        for group in groups:
            dist.distributed_c10d._set_pg_timeout(timeout, group)

    utils.set_pg_timeouts = set_pg_timeouts


@register_patch("torchtitan.cpu.flex_attention", backend="torchtitan", phase="setup", priority=16,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def flex_attention_cpu(ctx: PatchContext) -> None:
    """torchtitan's flex attention (gpt_oss's only kind, any model's with attn_type=flex) on the CPU: torch's
    flex_attention has no CPU backward and torchtitan compiles it and create_block_mask with inductor; the same
    attention in eager ops (cpu_attention.py) and the block masks built uncompiled."""
    from torch.nn.attention.flex_attention import create_block_mask

    from primus_hydra.backends.torchtitan.cpu_attention import eager_flex_attention

    attention = importlib.import_module("torchtitan.models.attention")
    attention.FlexAttentionWrapper._compiled_flex_attn = staticmethod(eager_flex_attention)
    attention._compiled_create_block_mask = create_block_mask


@register_patch("torchtitan.cpu.gpt_oss_float32_layers", backend="torchtitan", phase="setup", priority=17,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def gpt_oss_float32_layers_cpu(ctx: PatchContext) -> None:
    """torchtitan's gpt_oss builds its decoder layers in bfloat16 beside a float32 embedding and output, for FSDP's
    mixed precision to cast on GPUs; on the CPU (one process has no FSDP) the layers are float32 like every other
    torchtitan model's, and FSDP casts them as module.precision asks."""
    import torch

    gpt_oss = importlib.import_module("torchtitan.models.gpt_oss.model.model")
    build = gpt_oss.GptOssModel.__init__
    if getattr(build, "_primus_float32_layers", False):
        return

    def build_float32_layers(self, model_args) -> None:
        build(self, model_args)
        self.layers.to(torch.float32)

    build_float32_layers._primus_float32_layers = True
    gpt_oss.GptOssModel.__init__ = build_float32_layers


@register_patch("torchtitan.args.keys_since_0_2_1", backend="torchtitan", phase="build_args", priority=5,
                backend_versions=[f">={MOVED_IN}"])
def keys_since_0_2_1(ctx: PatchContext) -> None:
    """torchtitan >= 0.2.1: keys written with 0.2.0's names (training.seed, training.debug_moe_force_load_balance,
    model_args.n_expert_groups, ...) move to where this release reads them (debug, model_args.moe_args)."""
    move_keys(ctx.backend_args, MOVES_OF_0_2_1, ctx.backend_version)


@register_patch("torchtitan.args.keys_before_0_2_1", backend="torchtitan", phase="build_args", priority=5,
                backend_versions=[f"<{MOVED_IN}"])
def keys_before_0_2_1(ctx: PatchContext) -> None:
    """torchtitan 0.2.0 has no debug section and routes DeepSeek's expert groups outside its MoE args: those keys
    move back under 0.2.0's names."""
    move_keys(ctx.backend_args, reversed_moves(MOVES_OF_0_2_1), ctx.backend_version)
