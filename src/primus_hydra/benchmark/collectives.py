"""Collectives over a process group: time, correctness, and algorithm / bus bandwidth as nccl-tests defines them.

bytes: all_reduce, broadcast, send_recv the buffer; all_gather the gathered output; reduce_scatter the input;
all_to_all each rank's send buffer. algbw = bytes / time; busbw = algbw x factor: all_reduce 2(n-1)/n,
all_gather, reduce_scatter and all_to_all (n-1)/n, broadcast and send_recv 1.

Correctness: every element of every rank's buffers holds a value that depends on its position and on the rank,
v(r, p) = g(p) + r with g(p) = (7 p + 1) mod m, so a chunk that lands in the wrong place, comes from the wrong rank
or never arrives changes the result. m is a prime that divides no chunk length, small enough that the sum over all
ranks stays exact in float32. After the op each rank compares its whole result, slice by slice, with what the op
must give; the mismatches of all ranks are summed, so a receiver's failure reaches the sender's record.

PRIMUS_BENCHMARK_FAULT=misplace_chunk:<rank> (tests only) swaps the two halves of that rank's result before it is
checked: the misplaced chunk a broken collective would leave.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

import torch
import torch.distributed as dist

from primus_hydra.benchmark.cases import CHECK_SLICE, CollectiveCase, rounding_note
from primus_hydra.benchmark.timing import median_seconds
from primus_hydra.projection.step_time import bus_factor

EXACT_FLOAT32 = 2 ** 24  # every integer below it is a float32
STRIDE = 7
FAULT_ENV = "PRIMUS_BENCHMARK_FAULT"
# torch 2.13 renamed the tensor forms (the old names warn); older releases have only the old ones
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def value_period(ranks: int, chunk: int) -> int:
    """The largest prime m with ranks * (m - 1) + ranks * (ranks - 1) / 2 < 2^24 (a sum over the ranks is exact)
    that divides neither the chunk length nor the stride (a shifted chunk, or a stride of m, would look right)."""
    bound = (EXACT_FLOAT32 - 1 - ranks * (ranks - 1) // 2) // ranks + 1
    for candidate in range(max(bound, 3), 2, -1):
        if _is_prime(candidate) and chunk % candidate and candidate != STRIDE:
            return candidate
    return 3 if chunk % 3 else 5


def _is_prime(number: int) -> bool:
    return number > 1 and all(number % factor for factor in range(2, int(number ** 0.5) + 1))


def fault_rank(environ=os.environ) -> Optional[int]:
    spec = environ.get(FAULT_ENV)
    if not spec:
        return None
    kind, _, rank = spec.partition(":")
    if kind != "misplace_chunk" or not rank.isdigit():
        raise ValueError(f"{FAULT_ENV}={spec}: expected misplace_chunk:<rank>")
    return int(rank)


class Collective:
    """One op at one size on a group: `run()` does it once; `mismatches()` runs it on fresh values and counts the
    elements of this rank's result that are not what the op must give."""

    def __init__(self, case: CollectiveCase, group, device: torch.device):
        self.op, self.group, self.device = case.op, group, device
        self.ranks = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.global_ranks = dist.get_process_group_ranks(group) if group is not None else list(range(self.ranks))
        self.elements = case.elements
        self.chunk = self.elements // self.ranks
        self.period = value_period(self.ranks, self.chunk)
        op, chunk, elements = self.op, self.chunk, self.elements
        self.input = torch.empty(chunk if op == "all_gather" else elements, device=device)
        outputs = {"all_gather": elements, "reduce_scatter": chunk, "all_to_all": elements}
        self.output = torch.empty(outputs.get(op, elements if op == "send_recv" else 0), device=device)
        self.fill()

    @property
    def result(self) -> torch.Tensor:
        return self.input if self.op in ("all_reduce", "broadcast") else self.output

    def _g(self, positions: torch.Tensor) -> torch.Tensor:
        return ((positions * STRIDE + 1) % self.period).to(torch.float32)

    def _input_values(self, p: torch.Tensor) -> torch.Tensor:
        r = self.rank
        if self.op == "all_gather":
            return self._g(r * self.chunk + p) + r
        if self.op == "broadcast":
            return self._g(p) if r == 0 else torch.full(p.shape, -1.0, device=self.device)
        return self._g(p) + r

    def _expected(self, p: torch.Tensor) -> torch.Tensor:
        n, r, chunk = self.ranks, self.rank, self.chunk
        rank_sum = n * (n - 1) / 2
        if self.op == "all_reduce":
            return n * self._g(p) + rank_sum
        if self.op == "reduce_scatter":
            return n * self._g(r * chunk + p) + rank_sum
        if self.op == "all_gather":  # slot j holds rank j's chunk
            return self._g(p) + torch.div(p, chunk, rounding_mode="floor")
        if self.op == "all_to_all":  # slot j came from rank j's chunk r
            return self._g(r * chunk + p % chunk) + torch.div(p, chunk, rounding_mode="floor")
        if self.op == "broadcast":
            return self._g(p)
        return self._g(p) + (r - 1)  # send_recv: what the even rank below this one sent

    def _slices(self, length: int):
        for start in range(0, length, CHECK_SLICE):
            end = min(start + CHECK_SLICE, length)
            yield start, end, torch.arange(start, end, device=self.device, dtype=torch.int64)

    def fill(self) -> None:
        for start, end, positions in self._slices(self.input.numel()):
            self.input[start:end] = self._input_values(positions)
        self.output.fill_(-1.0)

    def run(self) -> None:
        op, group = self.op, self.group
        if op == "all_reduce":
            dist.all_reduce(self.input, group=group)
        elif op == "all_gather":
            ALL_GATHER(self.output, self.input, group=group)
        elif op == "reduce_scatter":
            REDUCE_SCATTER(self.output, self.input, group=group)
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

    def _checks_a_result(self) -> bool:
        """send_recv: only a receiver holds a result (a sender, or a last rank without a peer, has none)."""
        return self.op != "send_recv" or (self.rank % 2 == 1)

    def mismatches(self) -> int:
        self.fill()
        self.run()
        if not self._checks_a_result():
            return 0
        result = self.result
        if fault_rank() == dist.get_rank() and result.numel() >= 2:
            half = result.numel() // 2
            result[: 2 * half] = torch.cat([result[half: 2 * half], result[:half]])
        return sum(int((result[start:end] != self._expected(positions)).sum())
                   for start, end, positions in self._slices(result.numel()))


def measure(case: CollectiveCase, group, device: torch.device, *, warmup: int, iters: int,
            tick: Optional[Callable[[], None]] = None) -> dict:
    """This op at this size on `group`: the slowest rank's median time (a collective ends when the last rank does),
    and every rank's result checked."""
    collective = Collective(case, group, device)
    seconds = median_seconds(collective.run, device, warmup=warmup, iters=iters, tick=tick)
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    wrong = torch.tensor([collective.mismatches()], dtype=torch.float64, device=device)
    dist.all_reduce(wrong, op=dist.ReduceOp.SUM, group=group)
    seconds, mismatched = float(slowest[0]), int(wrong[0])
    nbytes = case.buffer_bytes
    algbw = nbytes / seconds / 1e9
    return {"op": case.op, "group": case.group, "bytes": nbytes, "requested_bytes": case.requested_bytes,
            "world_size": collective.ranks, "time_s": seconds, "algbw_gbps": algbw,
            "busbw_gbps": algbw * bus_factor(case.op, collective.ranks), "correct": mismatched == 0,
            "mismatched_elements": mismatched, "note": rounding_note(case)}
