"""What task=prepare_data shows while it runs: on a terminal a tqdm bar over the input's bytes (documents, tokens,
MB/s of text), else a line every LINE_EVERY_S seconds; then the summary, from DocumentLengths."""
from __future__ import annotations

import math
import sys
import time
from collections import Counter

LINE_EVERY_S = 10.0
BAR_REFRESH_S = 0.5
EXACT_LENGTHS = 1 << 16  # document lengths counted one by one below this; longer ones in a Counter


class DocumentLengths:
    """Tokens per document, counted in constant memory, for percentiles."""

    def __init__(self):
        self.short = [0] * EXACT_LENGTHS
        self.long: Counter = Counter()
        self.count = 0

    def add(self, lengths) -> None:
        for length in lengths:
            if length < EXACT_LENGTHS:
                self.short[length] += 1
            else:
                self.long[length] += 1
        self.count += len(lengths)

    def percentile(self, share: float) -> int:
        """The smallest length that at least `share` of the documents do not exceed (0 without documents)."""
        if self.count == 0:
            return 0
        wanted, seen = max(1, math.ceil(share * self.count)), 0
        for length, count in enumerate(self.short):
            seen += count
            if seen >= wanted:
                return length
        for length in sorted(self.long):
            seen += self.long[length]
            if seen >= wanted:
                return length
        return max(self.long)


class Progress:
    def __init__(self, total_bytes: int, label: str):
        self.total_bytes, self.label = total_bytes, label
        self.documents = self.tokens = self.text_bytes = 0
        self.started = self.shown = time.monotonic()
        self.bar = None
        if sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total_bytes, desc=label, unit="B", unit_scale=True, file=sys.stderr)
            except ImportError:
                self.bar = None
        self._disk_bytes = 0

    def rate_mb_s(self) -> float:
        return self.text_bytes / 1e6 / max(time.monotonic() - self.started, 1e-9)

    def update(self, documents: int, tokens: int, text_bytes: int, disk_bytes: int) -> None:
        self.documents += documents
        self.tokens += tokens
        self.text_bytes += text_bytes
        now = time.monotonic()
        if self.bar is not None:
            self.bar.update(max(disk_bytes - self._disk_bytes, 0))
            if now - self.shown >= BAR_REFRESH_S:
                self.shown = now
                self.bar.set_postfix_str(f"{self.documents} docs, {self.tokens} tokens, {self.rate_mb_s():.1f} MB/s")
        elif now - self.shown >= LINE_EVERY_S:
            self.shown = now
            print(f"{self.label}: {disk_bytes / 1e6:.1f} of {self.total_bytes / 1e6:.1f} MB read, {self.documents} "
                  f"documents, {self.tokens} tokens, {self.rate_mb_s():.1f} MB/s", file=sys.stderr, flush=True)
        self._disk_bytes = disk_bytes

    def close(self) -> float:
        """Seconds since the first document was read."""
        if self.bar is not None:
            self.bar.close()
        return time.monotonic() - self.started
