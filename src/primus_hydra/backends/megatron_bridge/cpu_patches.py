"""megatron_bridge.cpu.*: Megatron-Bridge's own `pretrain()` on the CPU, so a Bridge run can be trained and debugged
without a GPU.

Megatron-Bridge stands on megatron-core, so megatron-core's CPU patches (megatron.cpu.*) come first. On top of them:
Bridge's modules get the same `torch` stand-in (torch.cuda answered for the CPU, "cuda" tensors made on the CPU);
its initialisation no longer asserts CUDA and uses the wheel's prebuilt dataset helpers instead of running `make`;
the few `.cuda()` moves of batches and models go to the current device (the CPU, through the stand-in). Nothing
outside megatron.bridge / megatron.core sees a change, and GPU runs never load them. Written for, and gated to,
the releases in CPU_PATCH_VERSIONS.

One import needs help before Bridge can be imported at all without Transformer Engine, on any device:
`megatron.bridge.peft.lora` and `lora_layers` import transformer_engine.pytorch unguarded (every other TE import of
Bridge 0.3 is guarded). `allow_import_without_transformer_engine` (the adapter calls it before it imports Bridge)
loads those two modules with that one import replaced by
a stand-in whose classes match nothing, so Bridge takes its torch.nn.Linear paths; the rest of the process still
finds no transformer_engine, and megatron-core keeps its own "no TE" paths.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys
import types
from typing import Any, Optional

from primus_hydra.patches.registry import PatchContext, register_patch, runs_on_cpu
from primus_hydra.patches.versions import cpu_patches_failure

CPU_PATCH_VERSIONS = ("0.3.*",)
MEGATRON_BRIDGE = "megatron.bridge"
_UNGUARDED_TE_IMPORT = "import transformer_engine.pytorch as te\n"
_PEFT_MODULES = ("megatron.bridge.peft.lora_layers", "megatron.bridge.peft.lora")
_TO_DEVICE = ".to(torch.cuda.current_device(), non_blocking=True)"  # the CPU through the torch stand-in
# what pretrain() imports; imported before the stand-in goes in, so that none misses it
_TRAINING_MODULES = ("megatron.bridge.training.pretrain", "megatron.bridge.training.gpt_step",
                     "megatron.bridge.training.eval", "megatron.bridge.training.setup",
                     "megatron.bridge.training.train", "megatron.bridge.training.checkpointing",
                     "megatron.bridge.training.utils.batch_utils", "megatron.bridge.models.model_provider")


def cpu_support_failure(version: Optional[str]) -> Optional[str]:
    """One line when the installed megatron-bridge is outside the releases the CPU patches were written for."""
    return cpu_patches_failure("megatron_bridge", "megatron-bridge", version, CPU_PATCH_VERSIONS,
                               "megatron-bridge==0.3.1 (bash scripts/setup.sh installs it)")


class _Absent:
    """A Transformer Engine class where TE is not installed: nothing is an instance of it, nothing can make one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("transformer_engine is not installed: this Megatron-Bridge path needs it")


def _transformer_engine_stand_in() -> types.SimpleNamespace:
    names = ("Linear", "LayerNormLinear", "GroupedLinear", "LayerNormMLP")
    ops = ("Sequential", "Linear", "LayerNorm", "RMSNorm", "Quantize", "MakeExtraOutput", "Dropout",
           "ConstantScale", "AddExtraInput")
    return types.SimpleNamespace(
        **{name: type(name, (_Absent,), {}) for name in names},
        ops=types.SimpleNamespace(**{name: type(name, (_Absent,), {}) for name in ops}),
        fp8_autocast=None,
    )


class _PeftWithoutTransformerEngine(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads Bridge's two LoRA modules from their own files with the unguarded TE import replaced (see above)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _PEFT_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.origin:
                return importlib.util.spec_from_file_location(name, spec.origin, loader=self)
        return None

    def create_module(self, spec: Any) -> None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        from primus_hydra.errors import PatchError

        origin = module.__spec__.origin
        with open(origin, encoding="utf-8") as file:
            source = file.read()
        if source.count(_UNGUARDED_TE_IMPORT) != 1:
            raise PatchError(f"{module.__name__}: expected {_UNGUARDED_TE_IMPORT.strip()!r} once in {origin} "
                             f"(megatron-bridge changed; its import without transformer_engine needs a look)")
        module.__dict__["_te_stand_in"] = _transformer_engine_stand_in()
        source = source.replace(_UNGUARDED_TE_IMPORT, "te = _te_stand_in\n")
        exec(compile(source, origin, "exec"), module.__dict__)  # noqa: S102 - the installed library's own file


def allow_import_without_transformer_engine() -> None:
    """Make `import megatron.bridge` work where transformer_engine is absent (a no-op where it is installed or
    where Bridge is imported already)."""
    if importlib.util.find_spec("transformer_engine") is not None:
        return
    if any(isinstance(finder, _PeftWithoutTransformerEngine) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _PeftWithoutTransformerEngine())


def _without_transformer_engine(ctx: PatchContext) -> bool:
    return importlib.util.find_spec("transformer_engine") is None


@register_patch("megatron_bridge.peft.without_transformer_engine", backend="megatron_bridge", phase="setup",
                priority=9, backend_versions=CPU_PATCH_VERSIONS, condition=_without_transformer_engine)
def peft_without_transformer_engine(ctx: Optional[PatchContext]) -> None:
    """Without Transformer Engine, megatron-core still defines its TE layer names (as stand-ins that are no classes),
    so Bridge's PEFT believes TE is there and its isinstance checks fail: told it is not."""
    from megatron.bridge.peft import utils

    utils.HAVE_TE = False


@register_patch("megatron_bridge.resume.optimizer_state_without_transformer_engine", backend="megatron_bridge",
                phase="setup", priority=13, backend_versions=CPU_PATCH_VERSIONS, condition=_without_transformer_engine)
def optimizer_state_for_loading(ctx: Optional[PatchContext]) -> None:
    """Resuming, Bridge describes the distributed optimizer's state before its first step; with torch's Adam (no TE
    or Apex) that state, and its `step`, exist only after one, and megatron-core asserts. Each optimizer takes
    megatron-core's own dummy step first (zero gradients; the loaded state replaces it), as backend=megatron's
    trainer does. Its dp_reshardable load then leaves Adam's per-parameter `step` at that dummy 1 (the checkpoint
    keeps the step in the parameter groups): set from them, so the bias correction continues where it stopped."""
    import torch
    from megatron.bridge.training import checkpointing
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    from primus_hydra.backends.megatron.checkpoint_strategy import give_optimizer_state_for_loading

    load_state_dict = DistributedOptimizer.load_state_dict

    def load_with_adam_step(self, state_dict):
        load_state_dict(self, state_dict)
        steps = {group.get("step") for group in self.optimizer.param_groups} - {None}
        if len(steps) == 1:
            step = float(steps.pop())
            for state in self.optimizer.state.values():
                if "step" in state:
                    state["step"] = torch.tensor(step, dtype=state["step"].dtype)

    DistributedOptimizer.load_state_dict = load_with_adam_step

    describe = checkpointing.generate_state_dict

    def generate_state_dict(ckpt_cfg, model, optimizer, *args, optim_sd_kwargs=None, **kwargs):
        if optimizer is not None and (optim_sd_kwargs or {}).get("is_loading"):
            give_optimizer_state_for_loading(optimizer)
        return describe(ckpt_cfg, model, optimizer, *args, optim_sd_kwargs=optim_sd_kwargs, **kwargs)

    checkpointing.generate_state_dict = generate_state_dict


@register_patch("megatron_bridge.cpu.torch_cuda", backend="megatron_bridge", phase="setup", priority=10,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def torch_cuda_on_cpu(ctx: Optional[PatchContext]) -> None:
    """megatron-core's CPU patches, and Bridge's own torch.cuda calls and "cuda" tensors answered by the CPU."""
    import torch

    from primus_hydra.backends.megatron import cpu_patches as core_patches
    from primus_hydra.patches.source_rewrite import replace_module_global

    allow_import_without_transformer_engine()
    for name in _TRAINING_MODULES:  # first: the megatron-core modules they import get megatron-core's stand-in too
        importlib.import_module(name)
    core_patches.install_cpu_support()
    replace_module_global(MEGATRON_BRIDGE, "torch", torch, core_patches.torch_on_cpu())
    logging.getLogger("megatron.core.tensor_parallel.random").addFilter(_OnCpuEveryRngIsTheCpus())


@register_patch("megatron_bridge.cpu.initialize", backend="megatron_bridge", phase="setup", priority=11,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def initialize_on_cpu(ctx: Optional[PatchContext]) -> None:
    """initialize_megatron asserts CUDA unless told otherwise, and compiles the dataset helpers with `make` (the
    wheel ships them prebuilt, and no Makefile): the assert is skipped, the prebuilt helpers imported."""
    from megatron.bridge.training import initialize

    from primus_hydra.patches.source_rewrite import rewrite_function

    rewrite_function(initialize, "initialize_megatron", {"if not allow_no_cuda:": "if False:"},
                     rebind_prefix=MEGATRON_BRIDGE)
    initialize.compile_helpers = _prebuilt_dataset_helpers


def quiet_bridge_imports() -> None:
    """Bridge and the libraries it imports warn at import about every GPU kernel library they do not find (TE, Apex,
    modelopt's tested transformers) and that pretrain() is experimental: keep the log for what the run says."""
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"(megatron\.(core|bridge)|modelopt)(\.|$)")
    warnings.filterwarnings("ignore", message=r"Function 'pretrain' is experimental")
    warnings.filterwarnings("ignore", message=r"'pin_memory' argument is set as true but no accelerator")


class _OnCpuEveryRngIsTheCpus(logging.Filter):
    """On the CPU the model-parallel RNG tracker forks the CPU generator itself (megatron.cpu.rng_tracker), so
    megatron-core's warning that the CPU state changed inside a fork says nothing: dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "CPU RNG state changed within GPU RNG context" not in record.getMessage()


def _prebuilt_dataset_helpers() -> None:
    importlib.import_module("megatron.core.datasets.helpers_cpp")


@register_patch("megatron_bridge.cpu.tensor_moves", backend="megatron_bridge", phase="setup", priority=12,
                backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def tensor_moves_on_cpu(ctx: Optional[PatchContext]) -> None:
    """Batches, models and evaluation sums moved with `.cuda()`: to the current device (the CPU) instead."""
    from megatron.bridge.models import model_provider
    from megatron.bridge.training import eval as evaluation
    from megatron.bridge.training import gpt_step
    from megatron.bridge.training.utils import batch_utils

    from primus_hydra.patches.source_rewrite import rewrite_function

    rewrite_function(gpt_step, "get_batch_from_iterator", {"val.cuda(non_blocking=True)": "val" + _TO_DEVICE},
                     rebind_prefix=MEGATRON_BRIDGE)
    keys = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")
    rewrite_function(batch_utils, "get_batch_on_this_tp_rank",
                     {f'data["{key}"].cuda(non_blocking=True)': f'data["{key}"]' + _TO_DEVICE for key in keys},
                     rebind_prefix=MEGATRON_BRIDGE)
    rewrite_function(model_provider, "get_model",
                     {"model_module.cuda(torch.cuda.current_device())": "model_module.to(torch.cuda.current_device())"},
                     rebind_prefix=MEGATRON_BRIDGE)
    rewrite_function(evaluation, "evaluate", {"dtype=torch.float).cuda()": "dtype=torch.float)"},
                     rebind_prefix=MEGATRON_BRIDGE)


@register_patch("megatron_bridge.cpu.jit_warmup_only_for_fusions", backend="megatron_bridge", phase="setup",
                priority=13, backend_versions=CPU_PATCH_VERSIONS, condition=runs_on_cpu, tags=("cpu",))
def jit_warmup_only_for_fusions_in_use(ctx: Optional[PatchContext]) -> None:
    """pretrain()'s setup warms up the fused bias+activation and bias+dropout+add kernels (torch.compile: Inductor
    builds C++ for each new shape, 1-15 s a process) whether or not the model fuses them. Where the model fuses
    neither (bias_activation_fusion and bias_dropout_fusion off, as on the CPU), it compiles kernels nothing calls:
    skipped then; a model that fuses either is warmed up as before."""
    from megatron.bridge.training import setup

    warm_up = getattr(setup.set_jit_fusion_options, "__wrapped__", setup.set_jit_fusion_options)

    def set_jit_fusion_options(model_config: Any, micro_batch_size: int) -> None:
        if model_config.bias_activation_fusion or model_config.bias_dropout_fusion:
            warm_up(model_config, micro_batch_size)

    set_jit_fusion_options.__wrapped__ = warm_up
    setup.set_jit_fusion_options = set_jit_fusion_options


def install_cpu_support() -> None:
    """All megatron_bridge.cpu.* patches at once, outside a run (tests), Bridge made importable first."""
    allow_import_without_transformer_engine()
    for patch in (peft_without_transformer_engine, optimizer_state_for_loading, torch_cuda_on_cpu, initialize_on_cpu,
                  tensor_moves_on_cpu, jit_warmup_only_for_fusions_in_use):
        patch(None)
