"""task=benchmark's worker: the job's "trainer" (backend.trainer, set by conf/task/benchmark.yaml) runs the suite
on every rank, rank 0 gathers the records and writes benchmark.json, the table and the plots.

Before measuring, the default gemm dtypes are narrowed to those the device has a fast kernel for (one line for each
left out), and every case runs once untimed to estimate the run, printed before the first measurement; a case whose
single call would take longer than DRY_CALL_LIMIT_S is estimated from the last one of its kind instead."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from primus_hydra.backends.common.distributed import all_gather_objects
from primus_hydra.backends.common.metrics import cpu_matmul_peak_tflops
from primus_hydra.backends.cpu_peak_cache import cpu_model
from primus_hydra.benchmark import attention, collectives, gemm, report
from primus_hydra.benchmark.cases import (
    AttentionCase,
    CollectiveCase,
    GemmCase,
    collective_groups,
    default_dtypes,
    rounding_note,
    suite_cases,
)
from primus_hydra.benchmark.dtypes import supported
from primus_hydra.benchmark.progress import Progress, duration_text
from primus_hydra.benchmark.worker import MeasuringWorker
from primus_hydra.orchestrator.hardware_entry import configured_hardware_entry

log = logging.getLogger("primus_hydra.benchmark")

DRY_CALL_LIMIT_S = 1.0


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)

    return f"cpu: {cpu_model()} ({torch.get_num_threads()} threads per rank)"


def peak_tflops(cfg: Any, device: torch.device, dtype_name: str) -> Optional[float]:
    """The hardware entry's dense peak for this dtype (fp16 as bf16); on the CPU the measured matmul peak the
    trainers' MFU uses."""
    if cfg.platform.get("peak_tflops_per_device"):
        return float(cfg.platform.peak_tflops_per_device)
    if device.type == "cpu":
        if dtype_name not in ("fp32", "bf16"):
            return None

        return cpu_matmul_peak_tflops(torch.float32 if dtype_name == "fp32" else torch.bfloat16)

    entry = configured_hardware_entry(cfg)
    key = {"fp8": "peak_tflops_fp8", "fp32": "peak_tflops_fp32"}.get(dtype_name, "peak_tflops_bf16")
    value = entry.get(key)
    return float(value) if value else None


def case_work(case) -> float:
    """What a case's time grows with: FLOPs (gemm, attention's score products) or bytes (collectives)."""
    if isinstance(case, GemmCase):
        return float(case.m) * case.n * case.k
    if isinstance(case, AttentionCase):
        return float(case.batch) * case.heads * case.seq * case.seq * case.head_dim
    return float(case.buffer_bytes)


def case_kind(case) -> tuple:
    if isinstance(case, CollectiveCase):
        return ("collective", case.op, case.group)
    return (type(case).__name__, case.dtype)


def one_repetition(result) -> tuple[float, int]:
    """(seconds, calls) of one repetition, from a case's record(s) measured once: attention times a forward and a
    forward+backward for each backend that ran."""
    if isinstance(result, list):
        ran = [r for r in result if r.get("available")]
        return sum(2 * r["forward_s"] + r["backward_s"] for r in ran), 2 * len(ran)
    return float(result["time_s"]), 1


class BenchmarkRunner(MeasuringWorker):
    def init(self) -> None:
        task = self.cfg.task
        self.suite = str(task.suite)
        self.warmup, self.iters = int(task.warmup), int(task.iters)

    def train(self) -> dict:
        cases = self._cases()
        measures = [self._measure_of(case) for case in cases]
        estimates, calls = self._estimate(cases, measures)
        if self.dist.is_main:
            log.info("benchmark %s: %d cases x %d repetitions (task.warmup=%d + task.iters=%d), about %s",
                     self.suite, len(cases), self.warmup + self.iters, self.warmup, self.iters,
                     duration_text(sum(estimates)))
        records: list[dict] = []
        with Progress(self.dist.is_main, self.suite, estimates) as progress:
            for case, measure, case_calls in zip(cases, measures, calls):
                progress.start(case.label, case_calls)
                result = measure(self.warmup, self.iters, progress.tick)
                records += result if isinstance(result, list) else [result]
                progress.finish()
        if dist.is_initialized() and self.suite != "collectives":  # each rank measured its own device
            gathered = all_gather_objects([{**r, "rank": self.dist.rank} for r in records])
            records = [record for per_rank in gathered for record in per_rank]
        if self.dist.is_main:
            path = report.write_results(self.run_dir, self.suite, device_name(self.device), records)
            shown = [r for r in records if r.get("rank", 0) == 0]
            print(report.table(self.suite, shown), flush=True)
            png = report.plot(self.suite, records, self.run_dir)
            log.info("benchmark results: %s%s", path, f" (plot: {png})" if png else "")
        return {"suite": self.suite, "results": len(records)}

    # -- what to measure -------------------------------------------------------------------------------------
    def _cases(self) -> list:
        on_gpu = self.device.type == "cuda"
        world = dist.get_world_size() if dist.is_initialized() else 1
        dtypes = None
        if self.suite == "gemm" and not self.cfg.task.dtypes:
            candidates = [d for d in default_dtypes("gemm", on_gpu) if d in supported(self.device)]
            dtypes, skipped = gemm.fast_kernel_dtypes(candidates, self.device)
            for line in skipped if self.dist.is_main else []:
                log.warning("benchmark gemm: %s", line)
        cases = suite_cases(self.cfg, on_gpu=on_gpu, world=world, dtypes=dtypes)
        notes = sorted({rounding_note(c) for c in cases if isinstance(c, CollectiveCase) and c.rounded})
        for note in notes if self.dist.is_main else []:
            log.warning("benchmark collectives: task.sizes: %s", note)
        return cases

    def _measure_of(self, case) -> Callable[[int, int, Optional[Callable[[], None]]], Any]:
        """The case's measurement as fn(warmup, iters, tick) -> its record(s)."""
        device = self.device
        if isinstance(case, GemmCase):
            peak = peak_tflops(self.cfg, device, case.dtype)
            return lambda warmup, iters, tick: gemm.measure(case.m, case.n, case.k, case.dtype, device, warmup=warmup,
                                                            iters=iters, peak_tflops=peak, label=case.shape, tick=tick)
        if isinstance(case, AttentionCase):
            peak = peak_tflops(self.cfg, device, case.dtype)
            return lambda warmup, iters, tick: attention.measure(case, device, warmup=warmup, iters=iters,
                                                                 peak_tflops=peak, tick=tick)
        group = self._groups()[case.group]
        return lambda warmup, iters, tick: collectives.measure(case, group, device, warmup=warmup, iters=iters,
                                                               tick=tick)

    def _estimate(self, cases: list, measures: list) -> tuple[list[float], list[int]]:
        """Each case's expected seconds and calls: (warmup + iters) x one repetition, run once untimed; a repetition
        predicted to take longer than DRY_CALL_LIMIT_S (from the last measured case of its kind, scaled by the
        work) is not run. Every rank runs the same cases (collectives need them all): rank 0 decides."""
        repetitions = self.warmup + self.iters
        last: dict[tuple, tuple[float, float, int]] = {}  # kind -> (work, seconds, calls) of one repetition
        estimates, calls = [], []
        for case, measure in zip(cases, measures):
            kind, work = case_kind(case), case_work(case)
            seen_work, seen_seconds, seen_calls = last.get(kind, (work, 0.0, 1))
            predicted = seen_seconds * work / seen_work if kind in last else None
            if self._agree(predicted is not None and predicted > DRY_CALL_LIMIT_S):
                estimates.append(repetitions * (predicted or 0.0))  # or another rank's prediction decided
                calls.append(repetitions * seen_calls)
                continue
            started = time.perf_counter()
            seconds, case_calls = one_repetition(measure(0, 1, None))
            last[kind] = (work, seconds or time.perf_counter() - started, case_calls)
            estimates.append(repetitions * last[kind][1])
            calls.append(repetitions * case_calls)
        return estimates, calls

    def _agree(self, flag: bool) -> bool:
        """Rank 0's decision for every rank (a collective's untimed call needs every rank of its group)."""
        if self.suite != "collectives" or not dist.is_initialized():
            return flag
        decision = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.broadcast(decision, src=0)
        return bool(decision.item())

    def _groups(self) -> dict[str, Any]:
        """The world (inter_node when the job spans nodes) and, with several ranks per node, each node's ranks."""
        if not hasattr(self, "_process_groups"):
            nnodes, world = int(self.cfg.launch.nnodes), dist.get_world_size()
            self._process_groups = {}
            for label, ranks in collective_groups(nnodes, world):
                if ranks == world:
                    self._process_groups[label] = None
                else:  # every rank creates every node's group, in the same order
                    groups = [dist.new_group(list(range(node * ranks, (node + 1) * ranks))) for node in range(nnodes)]
                    self._process_groups[label] = groups[self.dist.rank // ranks]
        return self._process_groups
