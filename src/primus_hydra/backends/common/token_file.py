"""What a pre-tokenized token file (module.data.source=tokens: a flat array of token ids) must look like, checked
without torch: before a run starts (the adapter's training_failures) and again when the trainer maps it.

Beyond its size and ids, a file written with the other token width has a signature: uint32 ids below 65536 read
as uint16 give a zero in every second value (the high halves, little-endian); uint16 ids read as uint32 pair two
ids into values far beyond any vocabulary. Both are named, with the token_dtype that fits.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

PROBE_TOKENS = 1 << 20  # ids looked at: the first million, enough for the signatures and cheap to read


def token_file_failure(path, dtype: str, vocab_size: int, seq_length: int) -> Optional[str]:
    """One line when the file cannot feed a run of sequences of seq_length + 1 tokens; None when it can."""
    file = Path(str(path)).expanduser()
    key = f"module.data.path={file}"
    if not file.is_file():
        return f"{key}: not a file (module.data.source=tokens reads one flat {dtype} array)"
    itemsize = np.dtype(dtype).itemsize
    size = file.stat().st_size
    if size == 0 or size % itemsize:
        return f"{key}: {size} bytes is not a whole number of {dtype} tokens ({itemsize} bytes each); corrupt, or another token_dtype?"
    count = size // itemsize
    if count <= seq_length + 1:
        return f"{key}: {count} tokens is too short for module.seq_length={seq_length} (needs more than {seq_length + 1})"
    probe = np.fromfile(file, dtype=dtype, count=min(count, PROBE_TOKENS))
    other = "uint32" if dtype == "uint16" else "uint16"
    if dtype == "uint16" and len(probe) >= 64 and not probe[1::2].any() and probe[0::2].any():
        return (f"{key}: every second uint16 value is 0, the signature of uint32 token ids read as uint16; "
                f"set module.data.token_dtype=uint32")
    largest = int(probe.max())
    if largest >= vocab_size:
        hint = "wrong tokenizer, or model.vocab_size too small"
        if dtype == "uint32" and int(probe.view(np.uint16).max()) < vocab_size:
            hint = f"read as uint16 every id fits: set module.data.token_dtype={other}"
        return f"{key}: token id {largest} >= model.vocab_size={vocab_size} ({hint})"
    return None
