"""megatron.cpu.*: megatron-core on the CPU, so that a Megatron model can be trained and debugged without a GPU.

megatron-core assumes CUDA at ~180 places (`torch.cuda.current_device()`, `device="cuda"`, the CUDA RNG tracker,
`tensor.type() == 'torch.cuda.FloatTensor'`). These patches redirect them for megatron-core's own modules only:
each module's `torch` global becomes a stand-in whose `torch.cuda` answers for the CPU and whose tensor factories
map a "cuda" device to the CPU; the RNG tracker saves and restores the CPU generator; the type checks accept CPU
tensors. Nothing outside megatron-core sees a change, and GPU runs never load them (condition: the run's device is
the CPU). Written for, and gated to, the megatron-core releases in CPU_PATCH_VERSIONS; with another release a CPU
run stops before the model is built (cpu_support_failure).
"""
from __future__ import annotations

import importlib
import types
from typing import Any, Optional

from primus_hydra.patches.registry import PatchContext, register_patch, runs_on_cpu
from primus_hydra.patches.versions import cpu_patches_failure

CPU_PATCH_VERSIONS = ("0.16.*",)
MEGATRON_CORE = "megatron.core"
# what a training step imports; proxied together, so that a module imported later cannot miss the stand-in
_STEP_MODULES = (
    "megatron.core.models.gpt", "megatron.core.distributed", "megatron.core.optimizer", "megatron.core.pipeline_parallel",
    "megatron.core.tensor_parallel", "megatron.core.transformer.moe.moe_layer", "megatron.core.optimizer_param_scheduler",
    "megatron.core.dist_checkpointing", "megatron.core.dist_checkpointing.exchange_utils",
    "megatron.core.dist_checkpointing.strategies.torch", "megatron.core.dist_checkpointing.strategies.filesystem_async",
    "megatron.core.dist_checkpointing.strategies.fully_parallel", "megatron.core.dist_checkpointing.strategies.async_utils",
    "megatron.core.dist_checkpointing.strategies.state_dict_saver",
)
_FACTORIES = ("zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "rand", "randn", "randint", "linspace",
              "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like")


def cpu_support_failure(version: Optional[str]) -> Optional[str]:
    """One line when the installed megatron-core is outside the releases the CPU patches were written for."""
    return cpu_patches_failure("megatron", "megatron-core", version, CPU_PATCH_VERSIONS, "megatron-core==0.16.1")


def _on_cpu(device: Any) -> Any:
    import torch

    if isinstance(device, int) or (isinstance(device, str) and device.startswith("cuda")):
        return torch.device("cpu")
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("cpu")
    return device


class _NoStream:
    """What megatron-core does with CUDA streams and events has no meaning on the CPU: everything is in order."""

    def wait_stream(self, other=None) -> None: ...
    def wait_event(self, event=None) -> None: ...
    def synchronize(self) -> None: ...
    def record_event(self, event=None) -> "_NoStream":
        return self  # an event that has always happened
    def query(self) -> bool:
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None: ...


_ONE_STREAM = _NoStream()


def _cuda_on_cpu() -> types.ModuleType:
    """`torch.cuda` as megatron-core uses it, answered for the CPU: the current device is the CPU, the RNG state is
    the CPU generator's (seeded by the trainer, so manual_seed does nothing here), streams are in order."""
    import torch

    from primus_hydra.patches.source_rewrite import scoped_module_proxy

    def get_rng_state(device: Any = "cuda") -> Any:
        return torch.get_rng_state()

    def set_rng_state(state: Any, device: Any = "cuda") -> None:
        torch.set_rng_state(state)

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    return scoped_module_proxy(torch.cuda, "torch.cuda (on the CPU, for megatron-core)", {
        "current_device": lambda: torch.device("cpu"), "device_count": lambda: 1, "is_available": lambda: False,
        "get_rng_state": get_rng_state, "set_rng_state": set_rng_state, "manual_seed": nothing,
        "manual_seed_all": nothing, "synchronize": nothing, "empty_cache": nothing,
        "random": types.SimpleNamespace(get_rng_state=get_rng_state, set_rng_state=set_rng_state, manual_seed=nothing),
        # one stream: code that asks "am I on a side stream?" hears no
        "current_stream": lambda device=None: _ONE_STREAM, "default_stream": lambda device=None: _ONE_STREAM,
        "Stream": lambda *args, **kwargs: _ONE_STREAM, "stream": lambda stream=None: _ONE_STREAM,
        "Event": lambda *args, **kwargs: _ONE_STREAM,
        "memory_allocated": lambda device=None: 0, "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0, "reset_peak_memory_stats": nothing,
    })


def torch_on_cpu() -> types.ModuleType:
    import torch

    from primus_hydra.patches.source_rewrite import scoped_module_proxy

    def on_cpu(factory):
        def create(*args: Any, **kwargs: Any):
            if "device" in kwargs:
                kwargs["device"] = _on_cpu(kwargs["device"])
            return factory(*args, **kwargs)

        create.__name__ = create.__qualname__ = factory.__name__
        return create

    overrides = {name: on_cpu(getattr(torch, name)) for name in _FACTORIES}
    overrides.update(cuda=_cuda_on_cpu(), device=lambda *args, **kwargs: _on_cpu(torch.device(*args, **kwargs)))
    return scoped_module_proxy(torch, "torch (CUDA calls on the CPU, for megatron-core)", overrides)


CPU_CONDITION = runs_on_cpu


@register_patch("megatron.cpu.torch_cuda", backend="megatron", phase="setup", priority=10,
                backend_versions=CPU_PATCH_VERSIONS, condition=CPU_CONDITION, tags=("cpu",))
def torch_cuda_on_cpu(ctx: PatchContext) -> None:
    """megatron-core's torch.cuda calls and "cuda" tensors answered by the CPU, in megatron-core's modules only."""
    import torch

    from primus_hydra.patches.source_rewrite import replace_module_global

    for name in _STEP_MODULES:
        importlib.import_module(name)
    replace_module_global(MEGATRON_CORE, "torch", torch, torch_on_cpu())


@register_patch("megatron.cpu.rng_tracker", backend="megatron", phase="setup", priority=11,
                backend_versions=CPU_PATCH_VERSIONS, condition=CPU_CONDITION, tags=("cpu",))
def rng_tracker_on_cpu(ctx: PatchContext) -> None:
    """The model-parallel RNG tracker forks and restores the CPU generator instead of a CUDA one."""
    import torch
    from megatron.core.tensor_parallel import random

    def get_state(device: Any = "cuda", clone: bool = False, graph_safe: bool = False):
        return torch.get_rng_state()

    def set_state(new_state: Any, device: int = -1, graph_safe: bool = False) -> None:
        torch.set_rng_state(new_state)

    random._get_cuda_rng_state, random._set_cuda_rng_state = get_state, set_state


@register_patch("megatron.cpu.tensor_types", backend="megatron", phase="setup", priority=12,
                backend_versions=CPU_PATCH_VERSIONS, condition=CPU_CONDITION, tags=("cpu",))
def tensor_types_on_cpu(ctx: PatchContext) -> None:
    """The optimizers and gradient clipping accept CPU parameters (they compare tensor.type() with CUDA names)."""
    from megatron.core.optimizer import clip_grads, distrib_optimizer, optimizer

    from primus_hydra.patches.source_rewrite import rewrite_function

    half = ("type() in ['torch.cuda.HalfTensor', 'torch.cuda.BFloat16Tensor']",
            "type() in ['torch.HalfTensor', 'torch.BFloat16Tensor']")
    single = ("type() == 'torch.cuda.FloatTensor'", "type() == 'torch.FloatTensor'")
    rewrite_function(distrib_optimizer.DistributedOptimizer, "_build_model_and_main_param_groups",
                     {"model_param." + half[0]: "model_param." + half[1], "model_param." + single[0]: "model_param." + single[1]})
    rewrite_function(distrib_optimizer.DistributedOptimizer, "__init__", {"param." + half[0]: "param." + half[1]})
    rewrite_function(optimizer.Float16OptimizerWithFloat16Params, "__init__",
                     {"param." + half[0]: "param." + half[1], "param." + single[0]: "param." + single[1]})
    rewrite_function(clip_grads, "clip_grad_by_total_norm_fp32",
                     {"param.grad." + single[0]: "param.grad." + single[1]}, rebind_prefix=MEGATRON_CORE)


@register_patch("megatron.cpu.tensor_moves", backend="megatron", phase="setup", priority=13,
                backend_versions=CPU_PATCH_VERSIONS, condition=CPU_CONDITION, tags=("cpu",))
def tensor_moves_on_cpu(ctx: PatchContext) -> None:
    """Checkpointing moves tensors with `.cuda()` (gathering optimizer state, exchanging loaded shards): to the CPU."""
    from megatron.core.dist_checkpointing import exchange_utils
    from megatron.core.optimizer import distrib_optimizer

    from primus_hydra.patches.source_rewrite import rewrite_function

    here = ".to(torch.cuda.current_device())"  # the CPU, through megatron-core's torch stand-in
    rewrite_function(distrib_optimizer.DistributedOptimizer, "get_parameter_state_dp_zero",
                     {"send_tensor = send_tensor.cuda()": "send_tensor = send_tensor" + here})
    rewrite_function(exchange_utils, "exchange_loaded_tensors_gather_rounds",
                     {"all_loaded_tensors[shard_id].cuda()": "all_loaded_tensors[shard_id]" + here}, rebind_prefix=MEGATRON_CORE)
    rewrite_function(exchange_utils, "exchange_loaded_tensors_broadcast",
                     {"all_loaded_tensors[shard_id].cuda()": "all_loaded_tensors[shard_id]" + here}, rebind_prefix=MEGATRON_CORE)


@register_patch("megatron.cpu.moe_split_sizes", backend="megatron", phase="setup", priority=14,
                backend_versions=CPU_PATCH_VERSIONS, condition=CPU_CONDITION, tags=("cpu",))
def moe_split_sizes_on_cpu(ctx: PatchContext) -> None:
    """The all-to-all token dispatcher turns its split sizes into numpy arrays when it moves them off the GPU; on
    the CPU they stayed tensors, which all_to_all_single refuses: convert them there too."""
    from megatron.core.transformer.moe import moe_utils

    from primus_hydra.patches.source_rewrite import rewrite_function

    rewrite_function(moe_utils, "maybe_move_tensor_to_cpu",
                     {"if torch.is_tensor(tensor) and tensor.is_cuda:": "if torch.is_tensor(tensor) and (tensor.is_cuda or as_numpy):"},
                     rebind_prefix=MEGATRON_CORE)


def install_cpu_support() -> None:
    """All megatron.cpu.* patches at once, outside a run (counting parameters on the meta device, tests)."""
    for patch in (torch_cuda_on_cpu, rng_tracker_on_cpu, tensor_types_on_cpu, tensor_moves_on_cpu, moe_split_sizes_on_cpu):
        patch(None)
