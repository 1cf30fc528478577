"""The overrides the tests that train share: a quiet run dir, small batches, no checkpoints, and two short runs made
of them. A test adds what it needs after these (the last value of a key wins)."""
from __future__ import annotations

# no TensorBoard files, no loss plot, no progress bar: the run dir holds what the test reads
QUIET_LOGS = ["module.log.tensorboard=false", "module.log.plot=false", "module.log.progress_bar=false"]
# 8 sequences of 64 tokens per step, in micro batches of 4
SMALL_BATCHES = ["module.micro_batch_size=4", "module.global_batch_size=8", "module.seq_length=64"]
NO_CHECKPOINTS = ["module.checkpoint.interval=0", "module.checkpoint.save_final=false"]

# five steps of llama_tiny on small batches, a log line at every step: a loss curve in seconds
SHORT_RUN = ["model=llama_tiny", "module.train_iters=5", "module.warmup_iters=2", *SMALL_BATCHES,
             "module.log.interval=1", *QUIET_LOGS, *NO_CHECKPOINTS]
# two steps of 2 sequences of 32 tokens: a run that only has to start and finish
TINY_RUN = ["module.train_iters=2", "module.warmup_iters=0", "module.seq_length=32", "module.micro_batch_size=2",
            "module.global_batch_size=2", *QUIET_LOGS, "module.checkpoint.save_final=false"]

# Llama 4's MoE at toy size: layer 0 dense, layer 1 MoE (interleave_step 2), top-1 with a shared expert, the router's
# sigmoid score on the expert's input, the expert bias; widths as torchtitan's llama4 derives them (192 -> 128)
LLAMA4_TINY = ["model=llama4_17bx128e", "model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4",
               "model.num_kv_heads=2", "model.ffn_hidden_size=192", "model.vocab_size=256", "model.moe.num_experts=4",
               "model.moe.ffn_hidden_size=128", "model.max_position_embeddings=1024"]
# gpt-oss at toy size: sinks, a 4-token window on layer 0 (layer 1 full), the attention, router and expert biases,
# the clamped SwiGLU, YaRN (its ramp over the 8-wide head's frequency pairs 1 to 2)
GPT_OSS_TINY = ["model=gpt_oss_20b", "model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4",
                "model.num_kv_heads=2", "model.head_dim=8", "model.vocab_size=256", "model.moe.num_experts=4",
                "model.moe.top_k=2", "model.moe.ffn_hidden_size=32", "model.sliding_window=4",
                "model.max_position_embeddings=1024"]


def saving_every(steps: int, overrides: list[str]) -> list[str]:
    """`overrides` with a checkpoint saved every `steps` steps in place of their own interval."""
    kept = [override for override in overrides if not override.startswith("module.checkpoint.interval=")]
    return [*kept, f"module.checkpoint.interval={steps}"]
