"""Cross-field validation of a composed config: pure rules, nothing probed, nothing read from disk.

Every rule adds one line naming the keys and values involved and what would be allowed; all failures are
reported together. What depends on the machine (the resolved process count, visible GPUs, the PRIMUS_AUTO_*
overrides) or on files (data and checkpoint paths) is checked by the orchestrator (orchestrator/prepare.py),
and the layout for a world size by config/layout.py.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from primus_hydra.config.choices import auto_int_failure
from primus_hydra.config.derived_values import with_typed_sources
from primus_hydra.config.layout import stage_layers
from primus_hydra.config.schema_logger import check_logger
from primus_hydra.config.targets import load_target
from primus_hydra.config.validate_hybrid import check_hybrid_model
from primus_hydra.config.validate_numbers import number_failures
from primus_hydra.config.values import read_value
from primus_hydra.errors import ConfigValidationError

Rule = Callable[[DictConfig, List[str], List[str]], None]  # (cfg, failures, warnings)


def validate_config(cfg: DictConfig) -> list[str]:
    """Raise ConfigValidationError listing every failed rule; return the warnings (one line each). A line about a
    value derived from another one names the key the user typed (config/derived_values.py)."""
    try:
        return _checked(cfg)
    except ConfigValidationError as error:
        raise ConfigValidationError(with_typed_sources(cfg, error.failures)) from None


def _checked(cfg: DictConfig) -> list[str]:
    missing, leaves = _read_leaves(cfg)
    missing.sort()
    failures = [f"{key}: mandatory value is missing (???); set it on the command line, e.g. {key}=..." for key in missing]
    if failures:  # the other rules need complete values
        raise ConfigValidationError(failures)
    _check_unknown_keys(cfg, "", failures)
    if failures:
        raise ConfigValidationError(failures)
    failures += number_failures(cfg, leaves)
    if failures:  # a NaN passes every comparison below
        raise ConfigValidationError(failures)
    _positive_sizes(cfg, failures)
    if failures:  # sizes below 1 would make the divisibility rules meaningless (or divide by zero)
        raise ConfigValidationError(failures)
    warnings: list[str] = []
    for check in RULES:
        check(cfg, failures, warnings)
    if failures:
        raise ConfigValidationError(failures)
    return warnings


def _read_leaves(cfg: DictConfig) -> tuple[list[str], dict[str, Any]]:
    """The keys of mandatory values left at ??? (as OmegaConf.missing_keys names them, lists included), and every
    other scalar value by dotted key, resolved: one walk of the config for every rule that reads all its values
    (Hydra's own `hydra` node is not ours to check, and may not resolve yet)."""
    missing: list[str] = []
    leaves: dict[str, Any] = {}
    _walk(cfg, "", missing, leaves, skip="hydra")
    return missing, leaves


def _walk(node: DictConfig, prefix: str, missing: list[str], leaves: Optional[dict], skip: str = "") -> None:
    for key in node.keys():
        if key == skip:
            continue
        child = node._get_node(key)
        if child._is_missing():
            missing.append(node._get_full_key(key))
            continue
        value = read_value(node, key)  # an interpolation that fails raises here, as reading it anywhere would
        if isinstance(value, DictConfig):
            # a node reached through an interpolation is walked for ??? only: its values are read at their own key
            _walk(value, f"{prefix}{key}.", missing, leaves if isinstance(child, DictConfig) else None)
        elif isinstance(value, ListConfig):
            _walk_list(value, missing)
        elif leaves is not None:
            leaves[f"{prefix}{key}"] = value


def _walk_list(node: ListConfig, missing: list[str]) -> None:
    for index in range(len(node)):
        if node._get_node(index)._is_missing():
            missing.append(node._get_full_key(index))
            continue
        value = node[index]
        if isinstance(value, DictConfig):
            _walk(value, "", missing, None)
        elif isinstance(value, ListConfig):
            _walk_list(value, missing)


def _check_unknown_keys(node: DictConfig, prefix: str, failures: list[str]) -> None:
    """`+key=value` bypasses struct mode; a key that its schema does not declare is still an error here."""
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        declared = {f.name for f in dataclasses.fields(schema)} | ({"hydra"} if not prefix else set())
        for key in node.keys():
            if key not in declared:
                failures.append(
                    f"{prefix}{key}: unknown key (not in {schema.__name__}); allowed: {', '.join(sorted(declared))}"
                )
    for key in node.keys():
        if key == "hydra" and not prefix:
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(child)):
            _check_unknown_keys(child, f"{prefix}{key}.", failures)


AUTO_INT_KEYS = {  # key: the smallest integer allowed besides `auto`
    "launch.nproc_per_node": 1,
    "launch.master_port": 1,
    "module.parallel.dp": 1,
    "module.data.num_workers": 0,
    "platform.gpus_per_node": 0,
    "sweep.max_parallel": 1,
}


def _positive_sizes(cfg: DictConfig, failures: list[str]) -> None:
    positive = {
        "model.hidden_size": cfg.model.hidden_size,
        "model.num_layers": cfg.model.num_layers,
        "model.num_attention_heads": cfg.model.num_attention_heads,
        "model.num_kv_heads": cfg.model.num_kv_heads,
        "model.ffn_hidden_size": cfg.model.ffn_hidden_size,
        "model.vocab_size": cfg.model.vocab_size,
        "model.max_position_embeddings": cfg.model.max_position_embeddings,
        "module.train_iters": cfg.module.train_iters,
        "module.micro_batch_size": cfg.module.micro_batch_size,
        "module.global_batch_size": cfg.module.global_batch_size,
        "module.seq_length": cfg.module.seq_length,
        "module.parallel.tp": cfg.module.parallel.tp,
        "module.parallel.pp": cfg.module.parallel.pp,
        "module.parallel.cp": cfg.module.parallel.cp,
        "module.parallel.ep": cfg.module.parallel.ep,
        "module.log.interval": cfg.module.log.interval,
        "launch.nnodes": cfg.launch.nnodes,
    }
    for key, value in positive.items():
        if value < 1:
            failures.append(f"{key}={value}: must be >= 1")
    non_negative = {
        "module.warmup_iters": cfg.module.warmup_iters,
        "module.checkpoint.interval": cfg.module.checkpoint.interval,
        "module.weight_decay": cfg.module.weight_decay,
        "module.clip_grad": cfg.module.clip_grad,
        "module.min_lr": cfg.module.min_lr,
    }
    for key, value in non_negative.items():
        if value < 0:
            failures.append(f"{key}={value}: must be >= 0")
    for key, minimum in AUTO_INT_KEYS.items():
        failure = auto_int_failure(key, OmegaConf.select(cfg, key), minimum)
        if failure:
            failures.append(failure)
    port = OmegaConf.select(cfg, "launch.master_port")
    if str(port).isdigit() and int(port) > 65535:
        failures.append(f"launch.master_port={port}: must be 'auto' or a port number 1-65535")


def _attention_heads(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    model, tp = cfg.model, cfg.module.parallel.tp
    heads, kv_heads = model.num_attention_heads, model.num_kv_heads
    if heads < 1 or kv_heads < 1:
        return
    if model.head_dim is None and not model.mla.enabled and model.hidden_size % heads:
        failures.append(
            f"model.hidden_size={model.hidden_size} is not divisible by model.num_attention_heads={heads} "
            f"(or set model.head_dim explicitly)"
        )
    if heads % kv_heads:
        failures.append(
            f"model.num_attention_heads={heads} is not divisible by model.num_kv_heads={kv_heads} (GQA groups must be equal)"
        )
    if tp >= 1 and heads % tp:
        failures.append(f"module.parallel.tp={tp} does not divide model.num_attention_heads={heads}")
    if tp >= 1 and kv_heads % tp and not model.mla.enabled:
        failures.append(
            f"module.parallel.tp={tp} does not divide model.num_kv_heads={kv_heads} (each TP rank needs whole KV heads)"
        )
    wide = model.global_attention
    if wide.num_kv_heads is not None and wide.num_kv_heads >= 1 and heads % wide.num_kv_heads:
        failures.append(f"model.global_attention.num_kv_heads={wide.num_kv_heads}: must divide "
                        f"model.num_attention_heads={heads} (GQA groups must be equal)")
    if wide.rope_fraction > 1:
        failures.append(f"model.global_attention.rope_fraction={wide.rope_fraction}: must be in (0, 1] (the share of "
                        f"each head's channels RoPE rotates)")


def _mixture_of_experts(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    moe, ep = cfg.model.moe, cfg.module.parallel.ep
    if moe.num_experts < 0:
        failures.append(f"model.moe.num_experts={moe.num_experts}: must be >= 0 (0 = dense model)")
        return
    if moe.num_experts == 0:
        if ep > 1:
            failures.append(f"module.parallel.ep={ep} needs a MoE model, but model.moe.num_experts=0 ({cfg.model.name} is dense)")
        return
    if not 1 <= moe.top_k <= moe.num_experts:
        failures.append(f"model.moe.top_k={moe.top_k}: must be between 1 and model.moe.num_experts={moe.num_experts}")
    if moe.ffn_hidden_size < 1:
        failures.append(f"model.moe.ffn_hidden_size={moe.ffn_hidden_size}: must be >= 1 for a MoE model")
    if ep >= 1 and moe.num_experts % ep:
        failures.append(f"module.parallel.ep={ep} does not divide model.moe.num_experts={moe.num_experts}")
    if not 0 <= moe.first_dense_layers <= cfg.model.num_layers:
        failures.append(
            f"model.moe.first_dense_layers={moe.first_dense_layers}: must be between 0 and model.num_layers={cfg.model.num_layers}"
        )
    if moe.interleave_step < 1:
        failures.append(f"model.moe.interleave_step={moe.interleave_step}: must be >= 1 (1: every layer after "
                        f"model.moe.first_dense_layers is an MoE layer)")
    if moe.router_num_groups < 1 or moe.num_experts % moe.router_num_groups:
        failures.append(
            f"model.moe.router_num_groups={moe.router_num_groups} must divide model.moe.num_experts={moe.num_experts}"
        )
    elif not 1 <= moe.router_group_topk <= moe.router_num_groups:
        failures.append(
            f"model.moe.router_group_topk={moe.router_group_topk}: must be between 1 and router_num_groups={moe.router_num_groups}"
        )


def _pipeline_layers(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    layers, pp = cfg.model.num_layers, cfg.module.parallel.pp
    first = cfg.backend.get("decoder_first_pipeline_num_layers")
    last = cfg.backend.get("decoder_last_pipeline_num_layers")
    if cfg.backend.get("pipeline_layout") is not None:  # any split: backend=megatron's adapter checks it
        return
    if first is None and last is None:
        if pp >= 1 and layers >= 1 and layers % pp:
            failures.append(f"module.parallel.pp={pp} does not divide model.num_layers={layers} (each stage needs equal "
                            f"layers; backend=megatron can set backend.decoder_first/last_pipeline_num_layers)")
        return
    try:
        stage_layers(layers, pp, first, last)
    except ValueError:
        failures.append(f"backend.decoder_first_pipeline_num_layers={first}, decoder_last_pipeline_num_layers={last}: "
                        f"with module.parallel.pp={pp} the other stages must split the rest of model.num_layers={layers} "
                        f"evenly, each outer stage holding >= 1 layer (and pp >= 2)")
    if cfg.backend.get("virtual_stages_per_pipeline_rank"):
        failures.append("backend.decoder_first/last_pipeline_num_layers: not with backend.virtual_stages_per_pipeline_rank "
                        "(uneven stages take the 1F1B schedule)")


def _sequence(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    m, cp = cfg.module, cfg.module.parallel.cp
    if m.seq_length > cfg.model.max_position_embeddings:
        failures.append(
            f"module.seq_length={m.seq_length} exceeds model.max_position_embeddings={cfg.model.max_position_embeddings}"
        )
    if cp > 1 and m.seq_length % (2 * cp):
        failures.append(
            f"module.seq_length={m.seq_length} must be divisible by 2*cp = {2 * cp} (context-parallel load balancing)"
        )


def _learning_rate(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    m = cfg.module
    if m.lr < m.min_lr:  # lr > 0 is a number rule (config/validate_numbers.py)
        failures.append(f"module.lr={m.lr} is below module.min_lr={m.min_lr}; lr must be >= min_lr")
    if m.warmup_iters > m.train_iters:  # a short smoke run of a long recipe: what Megatron and torchtitan allow too
        if load_target(cfg.backend._target_, "backend._target_").traits.shortens_long_warmup:  # its adapter's
            warnings.append(f"module.warmup_iters={m.warmup_iters} exceeds module.train_iters={m.train_iters}: "
                            f"{cfg.backend.name} shortens its warmup to {m.train_iters} steps")
        else:
            warnings.append(f"module.warmup_iters={m.warmup_iters} exceeds module.train_iters={m.train_iters}: "
                            f"the learning rate rises for the whole run and never reaches module.lr={m.lr}")
    if m.lr_decay_iters is not None and m.lr_decay_iters < m.warmup_iters:
        failures.append(f"module.lr_decay_iters={m.lr_decay_iters} is below module.warmup_iters={m.warmup_iters}")
    for key in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= m[key] < 1.0:
            failures.append(f"module.{key}={m[key]}: must be in [0, 1)")
    if m.adam_eps <= 0:
        failures.append(f"module.adam_eps={m.adam_eps}: must be > 0")


def _data(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    from primus_hydra.config.data_split import split_failure  # task=status loads this module, checks no data

    data = cfg.module.data
    failure = split_failure(str(data.split), bool(cfg.module.eval_interval))
    if failure:
        failures.append(failure)
    if str(cfg.task.get("objective", "auto")) == "eval_loss" and not cfg.module.eval_interval:
        failures.append("task.objective=eval_loss needs an evaluation: set module.eval_interval (and "
                        "module.eval_iters), or use task.objective=mean_loss")
    if data.source == "text" and not data.get("tokenizer") and cfg.model.vocab_size < 256:
        failures.append(f"model.vocab_size={cfg.model.vocab_size}: module.data.source=text uses byte tokens and needs >= 256")
    if data.source == "tokens" and not data.path:
        failures.append("module.data.path is required with module.data.source=tokens (a pre-tokenized token file)")
    if data.source == "indexed" and not data.path:
        failures.append("module.data.path is required with module.data.source=indexed (a Megatron dataset prefix "
                        "<prefix>.bin/.idx, or a blend 'weight prefix weight prefix ...')")
    if data.source == "tokens" and data.token_dtype == "uint16" and cfg.model.vocab_size > 65536:
        failures.append(
            f"module.data.token_dtype=uint16 cannot hold ids of model.vocab_size={cfg.model.vocab_size}; use uint32"
        )


def _platform(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    peak = cfg.platform.peak_tflops_per_device
    if peak is not None and not (isinstance(peak, (int, float)) and peak > 0):
        failures.append(f"platform.peak_tflops_per_device={peak}: must be a positive number of TFLOP/s or null")


def _launch(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    launch = cfg.launch
    if launch.rdzv_backend == "static" and launch.max_restarts > 0:
        failures.append(
            f"launch.max_restarts={launch.max_restarts} needs launch.rdzv_backend=c10d (torch's static rendezvous cannot restart workers)"
        )
    if not 0 <= launch.node_rank < launch.nnodes:
        failures.append(f"launch.node_rank={launch.node_rank}: must be between 0 and launch.nnodes-1 = {launch.nnodes - 1}")
    for key in ("max_restarts", "shutdown_timeout_s"):
        if launch[key] < 0:
            failures.append(f"launch.{key}={launch[key]}: must be >= 0")
    for key in ("timeout_s", "monitor_interval"):
        if launch[key] <= 0:
            failures.append(f"launch.{key}={launch[key]}: must be > 0")


def _patches(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    enabled = str(cfg.patches.enabled).replace(",", "").strip()
    if not enabled:
        failures.append("patches.enabled is empty; allowed: all, none, or a comma-separated list of patch ids")


def _sweep(cfg: DictConfig, failures: list[str], warnings: list[str]) -> None:
    if cfg.sweep.probe_steps < 1:
        failures.append(f"sweep.probe_steps={cfg.sweep.probe_steps}: must be >= 1")


RULES: tuple[Rule, ...] = (_attention_heads, _mixture_of_experts, _pipeline_layers, _sequence, _learning_rate, _data,
                           _platform, _launch, _patches, _sweep, check_logger, check_hybrid_model)
