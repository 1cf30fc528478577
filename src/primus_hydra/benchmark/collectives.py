"""Collectives over a process group: time, correctness, and algorithm / bus bandwidth as nccl-tests defines them.

bytes: all_reduce, broadcast, send_recv the buffer; all_gather the gathered output; reduce_scatter the input;
all_to_all each rank's send buffer. algbw = bytes / time; busbw = algbw x factor: all_reduce 2(n-1)/n,
all_gather, reduce_scatter and all_to_all (n-1)/n, broadcast and send_recv 1. Every rank fills its buffers with
values that depend on its rank, so the result of each size is checked element by element.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from primus_hydra.benchmark.timing import median_seconds
from primus_hydra.projection.step_time import bus_factor

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ELEMENT = 4  # float32


def elements_for(nbytes: int, ranks: int) -> int:
    """The float32 elements of a buffer of about `nbytes`, a multiple of the group size (chunks split evenly)."""
    return max(ranks, -(-nbytes // (ELEMENT * ranks)) * ranks)


class Collective:
    """One op at one size on a group: `run()` does it once; `check()` runs it on fresh inputs and says if right."""

    def __init__(self, op: str, elements: int, group, device: torch.device):
        self.op, self.group, self.device = op, group, device
        self.ranks = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.global_ranks = dist.get_process_group_ranks(group) if group is not None else list(range(self.ranks))
        self.elements = elements
        chunk = elements // self.ranks
        self.input = torch.empty(chunk if op == "all_gather" else elements, device=device)
        self.output = torch.empty(elements if op == "all_gather" else chunk if op == "reduce_scatter" else elements,
                                  device=device)
        self.fill()

    @property
    def nbytes(self) -> int:
        return self.elements * ELEMENT

    def fill(self) -> None:
        n, r = self.ranks, self.rank
        if self.op == "all_to_all":  # chunk j of rank r holds r * n + j
            chunk = self.elements // n
            self.input.copy_(torch.arange(n, device=self.device, dtype=torch.float32).repeat_interleave(chunk) + r * n)
        elif self.op == "broadcast":
            self.input.fill_(7.0 if r == 0 else 0.0)
        else:
            self.input.fill_(float(r + 1))

    def run(self) -> None:
        op, group = self.op, self.group
        if op == "all_reduce":
            dist.all_reduce(self.input, group=group)
        elif op == "all_gather":
            dist.all_gather_into_tensor(self.output, self.input, group=group)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.output, self.input, group=group)
        elif op == "all_to_all":
            dist.all_to_all_single(self.output, self.input, group=group)
        elif op == "broadcast":
            dist.broadcast(self.input, src=self.global_ranks[0], group=group)
        elif op == "send_recv":  # pairs (0, 1), (2, 3), ...: the even one sends; an odd group's last rank idles
            peer = self.rank ^ 1
            if peer < self.ranks:
                if self.rank % 2 == 0:
                    dist.send(self.input, dst=self.global_ranks[peer], group=group)
                else:
                    dist.recv(self.output, src=self.global_ranks[peer], group=group)

    def check(self) -> bool:
        self.fill()
        self.run()
        n, r = self.ranks, self.rank
        if self.op == "all_reduce":
            expected = torch.full_like(self.input, n * (n + 1) / 2)
            return torch.equal(self.input, expected)
        if self.op == "all_gather":
            chunk = self.elements // n
            return torch.equal(self.output, torch.arange(1, n + 1, device=self.device, dtype=torch.float32).repeat_interleave(chunk))
        if self.op == "reduce_scatter":
            return torch.equal(self.output, torch.full_like(self.output, n * (n + 1) / 2))
        if self.op == "all_to_all":  # chunk i came from rank i, which put i * n + r there
            chunk = self.elements // n
            expected = torch.arange(n, device=self.device, dtype=torch.float32).repeat_interleave(chunk) * n + r
            return torch.equal(self.output, expected)
        if self.op == "broadcast":
            return torch.equal(self.input, torch.full_like(self.input, 7.0))
        if self.op == "send_recv" and r % 2 == 1:
            return torch.equal(self.output, torch.full_like(self.output, float(r)))  # the sender r-1 filled r
        return True


def measure(op: str, nbytes: int, group, device: torch.device, *, warmup: int, iters: int,
            label: str) -> Optional[dict]:
    """This op at this size on `group`: the slowest rank's median time (a collective ends when the last rank does)."""
    ranks = dist.get_world_size(group)
    collective = Collective(op, elements_for(nbytes, ranks), group, device)
    seconds = median_seconds(collective.run, device, warmup=warmup, iters=iters)
    correct = collective.check()
    summary = torch.tensor([seconds, 0.0 if correct else 1.0], dtype=torch.float64, device=device)
    dist.all_reduce(summary, op=dist.ReduceOp.MAX, group=group)
    seconds, correct = float(summary[0]), summary[1].item() == 0.0
    algbw = collective.nbytes / seconds / 1e9
    return {"op": op, "group": label, "bytes": collective.nbytes, "world_size": ranks, "time_s": seconds,
            "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(op, ranks), "correct": correct}
