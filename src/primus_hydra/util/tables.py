"""Plain-text tables for the terminal (sweep summaries, task=status): columns padded to their widest cell."""
from __future__ import annotations

from typing import Sequence


def aligned_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, rule: bool = False) -> str:
    """Two spaces between columns; `rule` puts a dashed line under the header."""
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines]
    if rule:
        text.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(text)
