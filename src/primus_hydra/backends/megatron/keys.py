"""backend=megatron's key table: the canonical keys Megatron-LM takes as they are, under its argument names
(backends/key_table.py says what drives it). args.py translates them group by group; what Megatron gets derived
from several keys (bf16, mock_data, data_path, save, eval_*) is args.py's own code."""
from __future__ import annotations

from primus_hydra.backends.key_table import Key, KeyTable

MEGATRON_KEYS = KeyTable([
    Key("module.train_iters", "train_iters", "training", checked=True),
    Key("module.micro_batch_size", "micro_batch_size", "training", checked=True),
    Key("module.global_batch_size", "global_batch_size", "training", checked=True),
    Key("module.seq_length", "seq_length", "training", checked=True),
    Key("module.lr", "lr", "optimizer", kind=float, checked=True),
    Key("module.min_lr", "min_lr", "optimizer", kind=float, checked=True),
    Key("module.warmup_iters", "lr_warmup_iters", "scheduler", checked=True),
    Key("module.lr_decay_iters", "lr_decay_iters", translated=False, checked=True),  # null: train_iters
    Key("module.weight_decay", "weight_decay", "optimizer", kind=float, checked=True),
    Key("module.adam_beta1", "adam_beta1", "optimizer", kind=float, checked=True),
    Key("module.adam_beta2", "adam_beta2", "optimizer", kind=float, checked=True),
    Key("module.adam_eps", "adam_eps", "optimizer", kind=float, checked=True),
    Key("module.clip_grad", "clip_grad", "optimizer", kind=float, checked=True),
    Key("module.seed", "seed", "training"),
    Key("module.exit_interval", "exit_interval", "training"),
    # the sizes are read from the job's ParallelLayout (as prepared), whose fields have these names
    Key("module.parallel.tp", "tensor_model_parallel_size", "layout", checked=True),
    Key("module.parallel.pp", "pipeline_model_parallel_size", "layout", checked=True),
    Key("module.parallel.cp", "context_parallel_size", "layout", checked=True),
    Key("module.parallel.ep", "expert_model_parallel_size", "layout", checked=True),
    Key("module.parallel.sequence_parallel", "sequence_parallel", "parallel", kind=bool, checked=True),
    Key("module.parallel.fsdp", "use_torch_fsdp2", kind=bool, translated=False),  # with the switches it needs
    Key("backend.use_distributed_optimizer", "use_distributed_optimizer", "distributed", kind=bool),
    Key("backend.virtual_stages_per_pipeline_rank", "num_virtual_stages_per_pipeline_rank", "distributed"),
    Key("backend.tokenizer_type", "tokenizer_type", "tokenizer"),
    Key("backend.tokenizer_model", "tokenizer_model", "tokenizer"),
    Key("module.log.interval", "log_interval", "logging"),
    Key("model.max_position_embeddings", "max_position_embeddings", "model", imports_null=False, checked=True),
    Key("model.vocab_size", "vocab_size", "model", imports_null=False),
    Key("module.data.num_workers", "num_workers", imports_null=False, translated=False),  # only when an integer
])
