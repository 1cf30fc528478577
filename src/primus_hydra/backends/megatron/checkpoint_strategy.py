"""megatron-core's torch_dist checkpoint format, written in this process.

megatron-core 0.16's `torch_dist` save strategy always hands the write to forked writer processes that report
through a multiprocessing Manager queue; when a writer dies (or the Manager cannot start) the trainer waits on a
queue forever. The files are ordinary torch.distributed.checkpoint shards, so this strategy writes the same format
with torch's own synchronous FileSystemWriter: megatron-core's key renaming, its sharded-to-torch translation and
its planner, then `dcp.save`. `dist_checkpointing.load` reads the result like any torch_dist checkpoint.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Union


def in_process_save_strategy() -> Any:
    """A SaveShardedStrategy for `dist_checkpointing.save(..., sharded_strategy=...)`."""
    import torch.distributed.checkpoint as dcp
    from megatron.core.dist_checkpointing.strategies.torch import (
        MCoreSavePlanner,
        TorchDistSaveShardedStrategy,
        _replace_state_dict_keys_with_sharded_keys,
        mcore_to_pyt_state_dict,
    )

    class InProcessTorchDistSave(TorchDistSaveShardedStrategy):
        def save(self, sharded_state_dict: dict, checkpoint_dir: Union[str, Path]) -> None:
            renamed, _, _ = _replace_state_dict_keys_with_sharded_keys(sharded_state_dict, self.keep_only_main_replica)
            state = mcore_to_pyt_state_dict(renamed, False)
            planner = MCoreSavePlanner(dedup_replicated_tensors=not self.keep_only_main_replica, flatten_state_dict=False)
            dcp.save(state, storage_writer=dcp.FileSystemWriter(str(checkpoint_dir), thread_count=1, sync_files=True),
                     planner=planner)

    return InProcessTorchDistSave("torch_dist", 1)


def give_optimizer_state_for_loading(optimizer: Any) -> None:
    """megatron-core's distributed optimizer describes its state (what a checkpoint load fills) only once it has
    some: each of the (chained) optimizers without state takes megatron-core's own dummy step first; the loaded
    state replaces it."""
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        if hasattr(inner, "_init_optimizer_states_with_dummy_values") and not inner.optimizer.state:
            inner._init_optimizer_states_with_dummy_values()
