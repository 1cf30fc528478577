"""Megatron's indexed datasets (module.data.source=indexed): `<prefix>.bin` holds every document's token ids back to
back, `<prefix>.idx` their dtype, lengths and boundaries. Read here with numpy alone (no torch, no megatron-core), so
that the orchestrator checks a dataset before a run starts and backend=torch reads one as a flat token stream.

module.data.path takes Megatron's `--data-path` spelling: one prefix, or a blend `weight prefix weight prefix ...`.

.idx layout (megatron.core.datasets.indexed_dataset, unchanged since Megatron-LM's MMapIndexedDataset):
magic `MMIDIDX\\0\\0`, version (<Q, 1), dtype code (<B), sequence count (<Q), document count (<Q), then int32
sequence lengths, int64 byte pointers, int64 document indices.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from primus_hydra.backends.common.indexed_stats import recorded_largest_token_id
from primus_hydra.backends.common.token_file import PROBE_TOKENS

INDEX_MAGIC = b"MMIDIDX\x00\x00"
DTYPE_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
_HEADER = struct.Struct("<QBQQ")  # version, dtype code, sequence count, document count (after the magic)


@dataclass(frozen=True)
class IndexedFile:
    prefix: Path
    dtype: type
    sequences: int
    documents: int  # entries of the document index: one more than the documents

    @property
    def bin_path(self) -> Path:
        return Path(f"{self.prefix}.bin")

    def token_count(self) -> int:
        return self.bin_path.stat().st_size // np.dtype(self.dtype).itemsize

    def tokens(self) -> np.ndarray:
        """Every token id of every document, back to back (memory-mapped)."""
        return np.memmap(self.bin_path, dtype=self.dtype, mode="r")


class IndexedFileError(ValueError):
    pass


def parse_blend(path: str) -> list[tuple[Optional[float], str]]:
    """`prefix` or `w1 prefix1 w2 prefix2 ...` (Megatron's --data-path) as [(weight or None, prefix)]."""
    words = str(path).split()
    if len(words) == 1:
        return [(None, words[0])]
    if len(words) % 2:
        raise IndexedFileError(f"module.data.path={path}: a blend is 'weight prefix weight prefix ...' (an even number "
                               f"of words), or one prefix")
    blend = []
    for weight, prefix in zip(words[0::2], words[1::2]):
        try:
            value = float(weight)
        except ValueError:
            raise IndexedFileError(f"module.data.path={path}: '{weight}' is not a weight (a blend is 'weight prefix "
                                   f"weight prefix ...')") from None
        if not math.isfinite(value) or value <= 0:
            raise IndexedFileError(f"module.data.path={path}: weight {weight} must be > 0 (a finite number)")
        blend.append((value, prefix))
    return blend


def read_index(prefix: str) -> IndexedFile:
    """The header of `<prefix>.idx`, checked against `<prefix>.bin`; IndexedFileError (one line) when they disagree."""
    root = Path(prefix).expanduser()
    idx, bin_path = Path(f"{root}.idx"), Path(f"{root}.bin")
    key = f"module.data.path={prefix}"
    missing = [p.name for p in (idx, bin_path) if not p.is_file()]
    if missing:
        raise IndexedFileError(f"{key}: no {' or '.join(missing)} (source=indexed reads Megatron's <prefix>.bin and "
                               f"<prefix>.idx, as written by Megatron's tools/preprocess_data.py)")
    with idx.open("rb") as handle:
        magic, header = handle.read(len(INDEX_MAGIC)), handle.read(_HEADER.size)
    if magic != INDEX_MAGIC or len(header) < _HEADER.size:
        raise IndexedFileError(f"{key}: {idx.name} is not a Megatron index (no MMIDIDX header)")
    version, code, sequences, documents = _HEADER.unpack(header)
    if version != 1 or code not in DTYPE_CODES:
        raise IndexedFileError(f"{key}: {idx.name} has index version {version}, dtype code {code}; "
                               f"expected version 1 and a code in 1..8")
    found = IndexedFile(root, DTYPE_CODES[code], sequences, documents)
    lengths = np.fromfile(idx, dtype=np.int32, count=sequences, offset=len(INDEX_MAGIC) + _HEADER.size)
    expected = int(lengths.sum(dtype=np.int64)) * np.dtype(found.dtype).itemsize
    if len(lengths) != sequences or bin_path.stat().st_size != expected:
        raise IndexedFileError(f"{key}: {bin_path.name} has {bin_path.stat().st_size} bytes, its index describes "
                               f"{expected}; a truncated copy, or .bin and .idx of different datasets?")
    return found


def document_token_offsets(found: IndexedFile) -> np.ndarray:
    """Where each document starts in the token stream, and the end: documents + 1 offsets (int64)."""
    idx = Path(f"{found.prefix}.idx")
    start = len(INDEX_MAGIC) + _HEADER.size
    lengths = np.fromfile(idx, dtype=np.int32, count=found.sequences, offset=start)
    sequence_starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    documents = np.fromfile(idx, dtype=np.int64, count=found.documents, offset=start + found.sequences * 12)
    return sequence_starts[documents]


def indexed_data_failures(path: str, vocab_size: int, seq_length: int, blends: bool) -> list[str]:
    """One line per prefix that cannot feed sequences of seq_length + 1 tokens of ids below vocab_size. The largest
    id is the one task=prepare_data's stats file records when it still describes the dataset (every token, read
    once when it was written), else the largest of the first PROBE_TOKENS."""
    try:
        blend = parse_blend(path)
    except IndexedFileError as error:
        return [str(error)]
    if len(blend) > 1 and not blends:
        return [f"module.data.path={path}: a blend of {len(blend)} datasets is read by backend=megatron; "
                f"backend=torch reads one prefix"]
    failures = []
    for _, prefix in blend:
        try:
            found = read_index(prefix)
        except IndexedFileError as error:
            failures.append(str(error))
            continue
        count = found.token_count()
        if count <= seq_length + 1:
            failures.append(f"module.data.path={prefix}: {count} tokens is too short for module.seq_length={seq_length}")
            continue
        recorded = recorded_largest_token_id(found.prefix)
        largest = recorded if recorded is not None else int(np.asarray(found.tokens()[:PROBE_TOKENS]).max())
        if largest >= vocab_size:
            failures.append(f"module.data.path={prefix}: token id {largest} >= model.vocab_size={vocab_size} "
                            f"(tokenized for another model, or model.vocab_size too small)")
    return failures
