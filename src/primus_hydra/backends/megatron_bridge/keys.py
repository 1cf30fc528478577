"""backend=megatron_bridge's key table: the canonical keys Megatron-Bridge's ConfigContainer takes as they are,
under their section.key names (backends/key_table.py says what drives it). The optimizer and scheduler sections
are Megatron's (megatron/keys.py); a Primus Bridge experiment names its keys as Megatron does, so the import reads
them with Megatron's table and the import check finds them here."""
from __future__ import annotations

from primus_hydra.backends.key_table import Key, KeyTable

MEGATRON_BRIDGE_KEYS = KeyTable([
    Key("module.train_iters", "train.train_iters", "train", checked=True),
    Key("module.micro_batch_size", "train.micro_batch_size", "train", checked=True),
    Key("module.global_batch_size", "train.global_batch_size", "train", checked=True),
    Key("module.exit_interval", "train.exit_interval", "train"),
    Key("module.seq_length", "model.seq_length", "sequence", checked=True),
    Key("module.min_lr", "optimizer.min_lr", translated=False, checked=True),  # megatron's optimizer_args
    Key("module.warmup_iters", "scheduler.lr_warmup_iters", translated=False, checked=True),  # its scheduler_args
    Key("module.parallel.tp", "model.tensor_model_parallel_size", "parallel", checked=True),
    Key("module.parallel.pp", "model.pipeline_model_parallel_size", "parallel", checked=True),
    Key("module.parallel.cp", "model.context_parallel_size", "parallel", checked=True),
    Key("module.parallel.ep", "model.expert_model_parallel_size", "parallel"),
    Key("module.log.interval", "logger.log_interval", "logger"),
    Key("module.seed", "rng.seed", "rng"),
])
