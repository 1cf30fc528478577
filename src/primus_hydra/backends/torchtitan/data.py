"""The project's token sources (mock, text, tokens, indexed) as torchtitan's dataloader: a Stateful iterable of
({"input": tokens}, labels) micro-batches, index for index backend=torch's batches, so curves compare across
backends and a resumed run reads what an uninterrupted one would."""
from __future__ import annotations

from typing import Any, Iterator

import torch

from primus_hydra.backends.common.data import TokenBatches


def build_step_batches(cfg: Any, dp_rank: int, dp_world_size: int) -> Any:
    """A torchtitan BaseDataLoader over TokenBatches for this data-parallel rank."""
    from torchtitan.components.dataloader import BaseDataLoader

    module = cfg.module
    batches = TokenBatches.for_module(module, cfg.model.vocab_size)
    micro = module.micro_batch_size
    accum = module.global_batch_size // (micro * dp_world_size)

    class StepBatches(BaseDataLoader):
        token_batches = batches  # the trainer's evaluation reads their held-out batches

        def __init__(self) -> None:
            self.next_step = 0  # the step the next micro-batch belongs to

        def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
            while True:
                step = self.next_step
                for index in range(accum):
                    tokens, labels = batches.batch(step, (dp_rank * accum + index) * micro, micro)
                    yield {"input": tokens}, labels
                self.next_step = step + 1

        def held_out_micro_batches(self, index: int) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
            """This data-parallel rank's micro-batches of held-out batch `index` (module.eval_interval)."""
            for micro_index in range(accum):
                first = (dp_rank * accum + micro_index) * micro
                tokens, labels = batches.batch(index, first, micro, held_out=True)
                yield {"input": tokens}, labels

        def state_dict(self) -> dict:
            return {"next_step": self.next_step}

        def load_state_dict(self, state_dict: dict) -> None:
            self.next_step = int(state_dict["next_step"])

    return StepBatches()
