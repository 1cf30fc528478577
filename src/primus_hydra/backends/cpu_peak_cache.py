"""The cache of measured CPU matmul peaks (TFLOP/s per machine, CPU model, thread count and dtype), torch-free so
that the orchestrator's projection reads what the native trainer measured (backends/torch/metrics.py)."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Optional

PEAK_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "primus_hydra" / "cpu_matmul_peak.json"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def cache_key(threads: int, dtype: str) -> str:
    return f"{platform.node()}|{cpu_model()}|threads={threads}|{dtype}"


def read_cache() -> dict:
    try:
        return json.loads(PEAK_CACHE.read_text())
    except (OSError, ValueError):
        return {}


def cached_peak(threads: int, dtype: str) -> Optional[float]:
    value = read_cache().get(cache_key(threads, dtype))
    return None if value is None else float(value)


def store_peak(threads: int, dtype: str, tflops: float) -> None:
    cache = read_cache()
    cache[cache_key(threads, dtype)] = tflops
    try:
        PEAK_CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = PEAK_CACHE.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(PEAK_CACHE)
    except OSError:
        pass  # a read-only home: measure again next time
