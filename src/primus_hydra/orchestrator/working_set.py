"""The memory one rank of a training job needs on its device, from the model and parallel config (no torch).

A first-order estimate, meant to size concurrency, not to promise a fit (a sweep's probe measures the real peak):

- model states: 16 bytes per parameter (fp32 master weights, fp32 grads, two fp32 Adam moments), sharded over
  tp * pp, and over dp as well with FSDP; a distributed optimizer (Megatron) shards the 12 bytes of master
  weights and moments over dp. Expert sharding (ep) is not modelled: MoE estimates err high.
- activations of one micro batch per layer: 34*s*b*h bytes at 16-bit (Korthikanti et al. 2022, "Reducing
  Activation Recomputation", without the a*s^2 score term: every backend here uses fused/flash attention),
  twice that at fp32, divided by tp, with s = seq_length / cp; a 1F1B pipeline's first stage keeps
  min(pp, micro batches) micro batches in flight.
- logits and their gradient in fp32: 2 * s*b*V*4 bytes / tp.
- 1 GiB for the CUDA/HIP context, communication buffers and allocator slack.
"""
from __future__ import annotations

from typing import Any

from primus_hydra.config.layout import data_parallel_size, gradient_accumulation
from primus_hydra.config.model_math import count_parameters

GIB = 1024.0 ** 3
STATE_BYTES_PER_PARAMETER = 16
CONTEXT_OVERHEAD_GIB = 1.0


def estimate_rank_gib(model: Any, module: Any, world_size: int, *, distributed_optimizer: bool = False,
                      overhead_gib: float = CONTEXT_OVERHEAD_GIB) -> float:
    p = module.parallel
    tp, pp, cp = int(p.tp), int(p.pp), int(p.cp)
    dp = max(1, data_parallel_size(p, world_size))
    parameters = count_parameters(model) / (tp * pp)
    if p.fsdp:
        states = parameters * STATE_BYTES_PER_PARAMETER / dp
    elif distributed_optimizer:
        states = parameters * (4 + (STATE_BYTES_PER_PARAMETER - 4) / dp)
    else:
        states = parameters * STATE_BYTES_PER_PARAMETER
    seq, batch, hidden = module.seq_length / cp, module.micro_batch_size, model.hidden_size
    per_layer = 34 * seq * batch * hidden
    if module.precision == "fp32":
        per_layer *= 2
    micro_batches = gradient_accumulation(module, dp)
    activations = per_layer * (model.num_layers / pp) * min(pp, micro_batches) / tp
    logits = 2 * seq * batch * model.vocab_size * 4 / tp
    return (states + activations + logits) / GIB + overhead_gib
