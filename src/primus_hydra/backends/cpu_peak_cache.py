"""The cache of measured CPU matmul peaks (TFLOP/s per machine, CPU model, thread count and dtype), torch-free so
that the orchestrator's projection reads what the native trainer measured (backends/common/metrics.py).

Every job of the user shares the file, and a measurement taken while the machine was busy is too low: a peak only
ever goes up for its key, and a peak that measured less with more threads than with fewer (of the same machine and
dtype) is not kept, nor read back from a file an older version wrote (it is measured again)."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Optional

from primus_hydra.util.user_cache import user_cache_dir

PEAK_CACHE = user_cache_dir() / "cpu_matmul_peak.json"
THREADS_FIELD = "|threads="


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def cache_key(threads: int, dtype: str) -> str:
    return f"{platform.node()}|{cpu_model()}{THREADS_FIELD}{threads}|{dtype}"


def read_cache() -> dict:
    try:
        cache = json.loads(PEAK_CACHE.read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def cached_peak(threads: int, dtype: str) -> Optional[float]:
    """The stored value; None when there is none, or when it is a peak that fewer threads beat (measured under
    load: the caller measures again)."""
    cache = read_cache()
    value = _number(cache.get(cache_key(threads, dtype)))
    if value is None or (_is_peak(dtype) and value < _best_with_fewer_threads(cache, threads, dtype)):
        return None
    return value


def store_peak(threads: int, dtype: str, value: float) -> bool:
    """Record a measurement; returns whether the cache holds a value for it now. A peak keeps the best value its
    key has seen; the peaks of more threads below it are dropped, and a peak below one of fewer threads is not
    kept (each was measured under load)."""
    cache = read_cache()
    key = cache_key(threads, dtype)
    if _is_peak(dtype):
        value = max(value, _number(cache.get(key)) or 0.0)
        for other in [other for other in cache if _same_series(other, key) and _threads_of(other) > threads]:
            if (_number(cache[other]) or 0.0) < value:
                del cache[other]
        if value < _best_with_fewer_threads(cache, threads, dtype):
            cache.pop(key, None)
            _write(cache)
            return False
    cache[key] = value
    return _write(cache)


def _write(cache: dict) -> bool:
    try:
        PEAK_CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = PEAK_CACHE.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(PEAK_CACHE)
    except OSError:
        return False  # a read-only home: measure again next time
    return True


def _is_peak(dtype: str) -> bool:
    """A matmul throughput (`torch.float32`, ...), which more threads never lower; other entries (task=projection's
    op dispatch time) are plain measurements."""
    return dtype.startswith("torch.")


def _best_with_fewer_threads(cache: dict, threads: int, dtype: str) -> float:
    key = cache_key(threads, dtype)
    values = [_number(cache[other]) for other in cache if _same_series(other, key) and _threads_of(other) < threads]
    return max([value for value in values if value is not None], default=0.0)


def _same_series(key: str, other: str) -> bool:
    """Two keys of the same machine, CPU model and dtype (any thread count)."""
    return (THREADS_FIELD in key and key.split(THREADS_FIELD)[0] == other.split(THREADS_FIELD)[0]
            and key.rsplit("|", 1)[-1] == other.rsplit("|", 1)[-1])


def _threads_of(key: str) -> int:
    text = key.split(THREADS_FIELD, 1)[1].split("|", 1)[0]
    return int(text) if text.isdigit() else 0


def _number(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
