"""Applies the job's layout to the native model with torch's own APIs, in two steps around making its weights:

1. `shard(model)` on the meta device: the pipeline stage split, tensor parallelism (DTensor `parallelize_module`),
   FSDP2 (`fully_shard`). The model then describes only what this rank holds.
2. materialize (model.py): storage and weights for those shards only.
3. `wrap_data_parallel(model)`: DDP where the layout replicates the model over data-parallel ranks.

The model itself stays plain (model.py)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from primus_hydra.backends.common.distributed import ParallelState
from primus_hydra.backends.torch.model import Transformer
from primus_hydra.config.layout import shards_beside_tp


def block_tp_plan() -> dict:
    """Megatron's split: q/k/v and gate/up column-wise (each rank owns whole heads / a slice of the FFN width),
    o and down row-wise (partial sums reduced once per block)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(),
    }


def stage_layer_ids(num_layers: int, pp: int, pp_rank: int) -> list[str]:
    per_stage = num_layers // pp
    return [str(i) for i in range(pp_rank * per_stage, (pp_rank + 1) * per_stage)]


def keep_pipeline_stage(model: Transformer, state: ParallelState) -> Transformer:
    """Drop what other stages own; names of what stays are unchanged (layers.5 stays layers.5)."""
    keep = set(stage_layer_ids(model.args.num_layers, state.layout.pp, state.pp_rank))
    for layer_id in list(model.layers.keys()):
        if layer_id not in keep:
            del model.layers[layer_id]
    if state.pp_rank != 0:
        model.tok_embeddings = None
    if not state.is_last_stage:
        model.norm = None
        model.output = None
    return model


def apply_tensor_parallel(model: Transformer, state: ParallelState) -> None:
    # DTensor, FSDP2 and pipelining take ~0.4 s each to import: only the layouts that use them pay for it
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp_mesh = state.mesh["tp"]
    root_plan = {"tok_embeddings": RowwiseParallel(input_layouts=Replicate())} if model.tok_embeddings is not None else {}
    if model.output is not None:
        root_plan["output"] = ColwiseParallel(output_layouts=Replicate())  # every TP rank computes the same loss
    if root_plan:
        parallelize_module(model, tp_mesh, root_plan)
    plan = block_tp_plan()
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, plan)


def apply_fsdp(model: Transformer, state: ParallelState) -> None:
    from torch.distributed.fsdp import fully_shard

    dp_mesh = state.mesh["dp"]
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)


def shards_over_data_parallel(state: ParallelState) -> bool:
    """FSDP2 over dp: asked for, or next to TP (a 2-D mesh); otherwise dp > 1 replicates (DDP)."""
    return shards_beside_tp(state.layout)


def shard(model: Transformer, state: ParallelState) -> Transformer:
    """The layout's split of a model on the meta device (PP, TP, FSDP2 change `model` in place)."""
    if state.layout.pp > 1:
        keep_pipeline_stage(model, state)
    if state.layout.tp > 1:
        apply_tensor_parallel(model, state)
    if shards_over_data_parallel(state):
        apply_fsdp(model, state)
    return model


def wrap_data_parallel(model: Transformer, state: ParallelState) -> nn.Module:
    """The module to run forward/backward on: DDP when data-parallel ranks hold replicas, else the model."""
    if state.layout.dp > 1 and not shards_over_data_parallel(state):
        device_ids = [torch.cuda.current_device()] if next(model.parameters()).is_cuda else None
        return DistributedDataParallel(model, process_group=state.dp_group, device_ids=device_ids)
    return model
