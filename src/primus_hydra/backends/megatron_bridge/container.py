"""Megatron-Bridge's ConfigContainer from the translated sections (args.py): a GPTModelProvider for the model
(Bridge's MambaModelProvider for a hybrid layer pattern, on GPUs), the project's batches behind a Bridge
DatasetProvider, and the training, optimizer, scheduler, checkpoint, logger and rng sections as Bridge's own
dataclasses. Imports Megatron-Bridge (a worker, after megatron_bridge.cpu.*)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training import config as bridge
from megatron.bridge.training.tokenizers.config import TokenizerConfig

from primus_hydra.backends.megatron.core_config import gpt_model_kwargs, transformer_config_fields
from primus_hydra.backends.megatron.core_model import layer_spec, uses_transformer_engine
from primus_hydra.backends.megatron.datasets import training_batches
from primus_hydra.backends.megatron_bridge.args import NO_LATENT_ATTENTION
from primus_hydra.errors import PrimusError

# GPTModel's own arguments (core_config.gpt_model_kwargs) as the provider's fields
_PROVIDER_NAMES = {"max_sequence_length": "seq_length"}
# MambaModel's own arguments, as the translation writes them (megatron/hybrid_args.py)
HYBRID_PROVIDER_FIELDS = ("hybrid_override_pattern", "hybrid_attention_ratio", "hybrid_mlp_ratio")


def model_provider(model_args: dict, device_type: str, init_weights: Callable[[list], list]) -> Any:
    """The provider of the translated architecture; megatron-core's local layer spec unless Transformer Engine is
    used (GPUs with TE), and `init_weights` (this rank's model chunks -> the same chunks) run before Bridge wraps
    them. A hybrid layer pattern takes Bridge's MambaModelProvider (megatron-core's MambaModel with its default
    Transformer Engine stack: GPUs only, refused on the CPU before launch)."""
    use_te = uses_transformer_engine(model_args, device_type)
    config_class, fields = transformer_config_fields(model_args, fused=use_te, use_cpu_initialization=device_type != "cuda")
    if config_class.__name__ != "TransformerConfig":  # refused before launch (adapter.training_failures)
        raise PrimusError(NO_LATENT_ATTENTION)
    provider_class = mamba_provider_class() if model_args.get("is_hybrid_model") else GPTModelProvider
    fields = {**_core_defaults_where_bridge_differs(config_class, provider_class), **fields}
    gpt = {_PROVIDER_NAMES.get(key, key): value for key, value in gpt_model_kwargs(model_args).items()}
    fields.update(gpt, should_pad_vocab=False)  # gpt_model_kwargs padded the vocabulary as backend=megatron does
    fields["seq_length"] = model_args["seq_length"]
    if provider_class is GPTModelProvider:
        if not use_te:
            fields["transformer_layer_spec"] = _local_layer_spec
    else:  # GPTModel's rope scaling has no MambaModel field: the provider takes the fields it has
        fields.update({key: model_args[key] for key in HYBRID_PROVIDER_FIELDS})
        known = {field.name for field in dataclasses.fields(provider_class)}
        fields = {key: value for key, value in fields.items() if key in known}
    provider = provider_class(**fields)
    provider.register_pre_wrap_hook(init_weights)
    return provider


def mamba_provider_class() -> type:
    from megatron.bridge.models.mamba.mamba_provider import MambaModelProvider

    return MambaModelProvider


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def _core_defaults_where_bridge_differs(config_class: type, provider_class: type) -> dict:
    """megatron-core's defaults where Bridge's provider changes them (fused cross entropy, softmax in the input dtype,
    ...): the provider then builds the model backend=megatron builds from the same arguments."""
    provider = {field.name: field for field in dataclasses.fields(provider_class)}
    wanted = {}
    for field in dataclasses.fields(config_class):
        if field.name in provider and field.init:
            core, bridge_default = _default(field), _default(provider[field.name])
            if core is not dataclasses.MISSING and not callable(core) and core != bridge_default:
                wanted[field.name] = core
    return wanted


def _local_layer_spec(config: Any, vp_stage: Optional[int] = None) -> Any:
    return layer_spec(config, use_te=False, vp_stage=vp_stage)


class StepSequences(torch.utils.data.Dataset):
    """The run's sequences in order: item k is sequence k % global_batch of step k // global_batch of the project's
    batches (megatron/datasets.py), as Bridge's sampler reads them (consecutive items, each rank its share)."""

    def __init__(self, batches: Any, global_batch_size: int, steps: int):
        self.batches, self.global_batch_size, self.steps = batches, global_batch_size, steps

    def __len__(self) -> int:
        return self.steps * self.global_batch_size

    def __getitem__(self, index: int) -> dict:
        batch = self.batches.micro_batch(index // self.global_batch_size, index % self.global_batch_size, 1)
        sample = {key: value[0] for key, value in batch.items()}
        length = sample["tokens"].shape[0]
        sample.setdefault("loss_mask", torch.ones(length, dtype=torch.float))
        sample.setdefault("position_ids", torch.arange(length))
        return sample


@dataclass(kw_only=True)
class ProjectBatches(bridge.DatasetProvider):
    """The project's batches (module.data.*: the same as backend=torch and backend=megatron's) as Bridge datasets."""

    seq_length: int
    cfg: Any = None
    run_dir: Optional[Path] = None
    rank: int = 0

    def build_datasets(self, context: Any) -> tuple[Any, Any, Any]:
        module = self.cfg.module
        batches = training_batches(self.cfg, self.run_dir, self.rank)
        train = StepSequences(batches, module.global_batch_size, module.train_iters)
        valid = None
        if module.eval_interval:  # the same held-out batches at every evaluation
            valid = StepSequences(batches.held_out(), module.global_batch_size, module.eval_iters)
        return train, valid, None


def config_container(cfg: Any, args: dict, run_dir: Path, device_type: str, rank: int,
                     init_weights: Callable[[list], list]) -> bridge.ConfigContainer:
    module = cfg.module
    return bridge.ConfigContainer(
        model=model_provider(args["model"], device_type, init_weights),
        train=bridge.TrainingConfig(**args["train"]),
        optimizer=bridge.OptimizerConfig(**args["optimizer"]),
        ddp=bridge.DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                                 use_distributed_optimizer=args["optimizer"]["use_distributed_optimizer"]),
        scheduler=bridge.SchedulerConfig(**args["scheduler"]),
        dataset=ProjectBatches(seq_length=module.seq_length, cfg=cfg, run_dir=run_dir, rank=rank,
                               dataloader_type="single", num_workers=0),
        logger=bridge.LoggerConfig(**args["logger"]),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=cfg.model.vocab_size),
        checkpoint=bridge.CheckpointConfig(**{key: value for key, value in args["checkpoint"].items() if value is not None}),
        dist=bridge.DistributedInitConfig(distributed_backend="nccl" if device_type == "cuda" else "gloo"),
        rng=bridge.RNGConfig(**args["rng"]),
        peft=lora(args["peft"]) if args.get("peft") else None,
    )


def lora(section: dict) -> Any:
    """Megatron-Bridge's LoRA for the translated `peft` section: adapters beside the target linear layers, the base
    weights frozen (Bridge then saves and trains the adapters only)."""
    from megatron.bridge.peft.lora import LoRA

    fields = {key: value for key, value in section.items() if key != "method"}
    return LoRA(**fields)
