"""Pipeline parallelism with torch.distributed.pipelining: this rank's stage of the model (see
parallelize.keep_pipeline_stage) driven by a GPipe or 1F1B schedule over the step's micro-batches."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from primus_hydra.backends.common.data import TokenBatches
from primus_hydra.backends.common.distributed import ParallelState, sum_over_pipeline

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class PipelineRunner:
    def __init__(self, stage_module: torch.nn.Module, state: ParallelState, device: torch.device, schedule_name: str,
                 micro_batch_size: int):
        self.state, self.device = state, device
        self.micro_batches, self.micro_batch_size = state.layout.grad_accum, micro_batch_size
        stage = PipelineStage(stage_module, state.pp_rank, state.layout.pp, device, group=state.pp_group)
        schedule = SCHEDULES[schedule_name]
        # scale_grads: gradients are averaged over micro-batches, as gradient accumulation does without PP
        self.schedule = schedule(stage, n_microbatches=self.micro_batches, loss_fn=self._loss, scale_grads=True)

    @staticmethod
    def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    def step(self, data: TokenBatches, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward/backward of all micro-batches; returns (mean loss, 0 aux loss) on every stage."""
        return self._run(self.schedule.step, data, step), torch.zeros((), device=self.device)

    def evaluate(self, data: Any, step: int) -> torch.Tensor:
        """Forward only (the schedule's eval) over batch `step` of `data`: its mean loss on every stage."""
        return self._run(self.schedule.eval, data, step)

    def _run(self, run: Any, data: Any, step: int) -> torch.Tensor:
        inputs, targets = data.batch(step, 0, self.micro_batches * self.micro_batch_size)
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        losses: list[torch.Tensor] = []
        if self.state.pp_rank == 0:
            run(inputs)
        elif self.state.is_last_stage:
            run(target=targets, losses=losses)
        else:
            run()
        loss = torch.stack(losses).detach().mean() if losses else torch.zeros((), device=self.device)
        return sum_over_pipeline(loss, self.state)
