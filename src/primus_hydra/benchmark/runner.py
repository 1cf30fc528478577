"""task=benchmark's worker: the job's "trainer" (backend.trainer, set by conf/task/benchmark.yaml) runs the suite
on every rank, rank 0 gathers the records and writes benchmark.json, the table and the plots."""
from __future__ import annotations

import logging
import sys
from typing import Any, Optional

import torch
import torch.distributed as dist

from primus_hydra.backends.torch.distributed import all_gather_objects
from primus_hydra.benchmark import attention, collectives, gemm, report
from primus_hydra.benchmark.dtypes import supported
from primus_hydra.benchmark.worker import MeasuringWorker

log = logging.getLogger("primus_hydra.benchmark")

CPU_GEMM_SIZES = (256, 512, 1024, 2048)
GPU_GEMM_SIZES = (1024, 2048, 4096, 8192, 16384)
CPU_MESSAGE_BYTES = tuple(4 ** power for power in range(6, 13))  # 4 KiB .. 16 MiB
GPU_MESSAGE_BYTES = tuple(4 ** power for power in range(5, 15))  # 1 KiB .. 256 MiB


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from primus_hydra.backends.cpu_peak_cache import cpu_model

    return f"cpu: {cpu_model()} ({torch.get_num_threads()} threads per rank)"


def peak_tflops(cfg: Any, device: torch.device, dtype_name: str) -> Optional[float]:
    """The hardware entry's dense peak for this dtype (fp16 as bf16); on the CPU the measured matmul peak the
    trainers' MFU uses."""
    if cfg.platform.get("peak_tflops_per_device"):
        return float(cfg.platform.peak_tflops_per_device)
    if device.type == "cpu":
        if dtype_name not in ("fp32", "bf16"):
            return None
        from primus_hydra.backends.torch.metrics import cpu_matmul_peak_tflops

        return cpu_matmul_peak_tflops(torch.float32 if dtype_name == "fp32" else torch.bfloat16)
    from primus_hydra.orchestrator.hardware_entry import configured_hardware_entry

    entry = configured_hardware_entry(cfg)
    key = {"fp8": "peak_tflops_fp8", "fp32": "peak_tflops_fp32"}.get(dtype_name, "peak_tflops_bf16")
    value = entry.get(key)
    return float(value) if value else None


class BenchmarkRunner(MeasuringWorker):
    def init(self) -> None:
        task = self.cfg.task
        self.suite = str(task.suite)
        self.warmup, self.iters = int(task.warmup), int(task.iters)

    def train(self) -> dict:
        items = self._items()
        records: list[dict] = []
        with _progress(self.dist.is_main, len(items), self.suite) as advance:
            for describe, measure in items:
                result = measure()
                records += result if isinstance(result, list) else [result]
                advance(describe)
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
    def _items(self) -> list[tuple[str, Any]]:
        task, module, model = self.cfg.task, self.cfg.module, self.cfg.model
        on_gpu = self.device.type == "cuda"
        dtypes = list(task.dtypes) if task.dtypes else supported(self.device)
        kw = dict(warmup=self.warmup, iters=self.iters)
        items = []
        if self.suite == "gemm":
            sizes = list(task.sizes) if task.sizes else list(GPU_GEMM_SIZES if on_gpu else CPU_GEMM_SIZES)
            tokens, tp = int(module.micro_batch_size) * int(module.seq_length), int(module.parallel.tp)
            for dtype in dtypes:
                peak = peak_tflops(self.cfg, self.device, dtype)
                for size in sizes:
                    items.append((f"gemm {size}^3 {dtype}", _bind(gemm.measure, size, size, size, dtype, self.device,
                                                                  peak_tflops=peak, **kw)))
                for label, m, n, k in gemm.model_shapes(model, tokens, tp):
                    items.append((f"gemm {label} {dtype}", _bind(gemm.measure, m, n, k, dtype, self.device,
                                                                 peak_tflops=peak, label=f"{model.name}.{label}", **kw)))
        elif self.suite == "attention":
            for dtype in (list(task.dtypes) if task.dtypes else (["bf16"] if on_gpu else ["fp32"])):
                peak = peak_tflops(self.cfg, self.device, dtype)
                items.append((f"attention {dtype}", _bind(attention.measure, model, batch=int(module.micro_batch_size),
                                                          seq=int(module.seq_length), tp=int(module.parallel.tp),
                                                          dtype_name=dtype, device=self.device, peak_tflops=peak, **kw)))
        else:
            sizes = list(task.sizes) if task.sizes else list(GPU_MESSAGE_BYTES if on_gpu else CPU_MESSAGE_BYTES)
            for label, group in self._groups():
                for op in collectives.OPS:
                    for size in sizes:
                        items.append((f"{op} {size:,} B ({label})",
                                      _bind(collectives.measure, op, size, group, self.device, label=label, **kw)))
        return items

    def _groups(self) -> list[tuple[str, Any]]:
        """The world (inter_node when the job spans nodes) and, with several ranks per node, each node's ranks."""
        nnodes, world = int(self.cfg.launch.nnodes), dist.get_world_size()
        groups = [("inter_node" if nnodes > 1 else "intra_node", None)]
        per_node = world // nnodes
        if nnodes > 1 and per_node > 1:
            node_groups = [dist.new_group(list(range(node * per_node, (node + 1) * per_node))) for node in range(nnodes)]
            groups.append(("intra_node", node_groups[self.dist.rank // per_node]))
        return groups


def _bind(fn, *args, **kwargs):
    return lambda: fn(*args, **kwargs)


class _progress:
    """A tqdm bar on rank 0 with a terminal, else a log line every tenth item."""

    def __init__(self, main: bool, total: int, suite: str):
        self.main, self.total, self.suite, self.done, self.bar = main, total, suite, 0, None

    def __enter__(self):
        if self.main and sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=self.total, desc=f"benchmark {self.suite}", unit="case")
            except ImportError:
                self.bar = None
        return self.advance

    def advance(self, describe: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(describe, refresh=False)
            self.bar.update(1)
        elif self.main and (self.done % max(1, self.total // 10) == 0 or self.done == self.total):
            log.info("benchmark %s: %d/%d (%s)", self.suite, self.done, self.total, describe)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
