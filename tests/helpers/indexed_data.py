"""Megatron indexed datasets for tests, written by megatron-core's own IndexedDatasetBuilder in a child process (an
import of megatron-core in the test process would set TORCHINDUCTOR_CACHE_DIR for every later test)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np

_WRITER = """
import json, sys
import numpy as np
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
for spec in json.loads(sys.stdin.read()):
    builder = IndexedDatasetBuilder(spec["prefix"] + ".bin", dtype=getattr(np, spec["dtype"]))
    for document in spec["documents"]:
        builder.add_document(np.asarray(document), [len(document)])
    builder.finalize(spec["prefix"] + ".idx")
"""


def write_indexed(datasets: dict[Path, list[np.ndarray]], dtypes: Optional[dict[Path, str]] = None) -> None:
    """{prefix: documents (arrays of token ids)} as <prefix>.bin / <prefix>.idx, uint16 ids unless dtypes says."""
    specs = [{"prefix": str(prefix), "dtype": (dtypes or {}).get(prefix, "uint16"),
              "documents": [np.asarray(d).tolist() for d in documents]} for prefix, documents in datasets.items()]
    result = subprocess.run([sys.executable, "-c", _WRITER], input=json.dumps(specs), text=True, capture_output=True)
    assert result.returncode == 0, result.stderr[-2000:]


def random_documents(seed: int, count: int, vocab_size: int, min_len: int = 20, max_len: int = 400) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab_size, size=int(rng.integers(min_len, max_len))) for _ in range(count)]
