"""What megatron-core's model, DDP and optimizer do, whichever front end drives them (backend=megatron, and
backend=megatron_bridge, whose models are megatron-core's)."""
from __future__ import annotations

from primus_hydra.backends.traits import RECOMPUTE_MODES, BackendTraits

MEGATRON_CORE_TRAITS = BackendTraits(
    interleaved_pipeline=True, uneven_pipeline_stages=True, sequence_parallel_with_tp=True,
    distributed_optimizer=True, recompute_key="recompute_granularity", recompute_off="null",
    searched_recompute=RECOMPUTE_MODES, vocab_pad_multiple=128,  # make_vocab_size_divisible_by
    bf16_state_bytes=(2, 4, 12),  # bf16 weights, fp32 main gradients, fp32 master weights and two Adam moments
    bf16_gradient_reduction=True,
    interleaved_moe=True,  # moe_layer_freq as a pattern, moe_apply_probs_on_input
)
