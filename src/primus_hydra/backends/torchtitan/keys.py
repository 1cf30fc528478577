"""backend=torchtitan's key table: the canonical keys torchtitan's JobConfig takes as they are, under their
section.key names (backends/key_table.py says what drives it). args.py translates them section by section; what
torchtitan gets derived from several keys (decay_type, min_lr_factor, the data-parallel degrees, the batch,
mixed precision) is args.py's own code."""
from __future__ import annotations

from primus_hydra.backends.key_table import Key, KeyTable

TORCHTITAN_KEYS = KeyTable([
    Key("module.train_iters", "training.steps", "training", checked=True),
    Key("module.micro_batch_size", "training.local_batch_size", "training", checked=True),
    Key("module.seq_length", "training.seq_len", "training", checked=True),
    Key("module.clip_grad", "training.max_norm", "training", kind=float, checked=True),
    Key("module.lr", "optimizer.lr", "optimizer", kind=float, checked=True),
    Key("module.adam_eps", "optimizer.eps", "optimizer", kind=float, checked=True),
    Key("module.adam_beta1", "optimizer.beta1", "optimizer", kind=float, checked=True),
    Key("module.adam_beta2", "optimizer.beta2", "optimizer", kind=float, checked=True),
    Key("module.weight_decay", "optimizer.weight_decay", "optimizer", kind=float, checked=True),
    Key("module.warmup_iters", "lr_scheduler.warmup_steps", "lr_scheduler", checked=True),
    Key("module.lr_decay_iters", "lr_scheduler.total_steps", "lr_scheduler"),  # null: training.steps
    Key("module.parallel.tp", "parallelism.tensor_parallel_degree", "parallelism", checked=True),
    Key("module.parallel.pp", "parallelism.pipeline_parallel_degree", "parallelism", checked=True),
    Key("module.parallel.cp", "parallelism.context_parallel_degree", "parallelism", checked=True),
    Key("module.parallel.ep", "parallelism.expert_parallel_degree", "parallelism", checked=True),
    Key("backend.activation_checkpoint", "activation_checkpoint.mode", "activation_checkpoint"),
    Key("backend.compile", "compile.enable", kind=bool, translated=False),  # or module.compile
    Key("module.seed", "debug.seed", "debug", imports_null=False),
    Key("module.log.interval", "metrics.log_freq", translated=False),  # every step reaches metrics.jsonl
    Key("backend.tokenizer_path", "model.hf_assets_path", imports_null=False, translated=False),  # or the run dir's
])
