"""Python's cyclic collector kept off the long-lived objects a process makes at its start.

Importing torch and a backend's libraries and building a model make ~3 x 10^5 objects that live as long as the
process, and almost no garbage; the collector would scan them all at every pass of its oldest generation (~5 passes,
~0.35 s here, during set-up alone). The runtime's set-up and teardown and the elastic agent's imports before it
forks its workers run under collector_paused (gc.freeze before a fork is also what keeps the workers from touching,
and so copying, the memory pages they share with it).
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def collector_paused(freeze_what_was_made: bool) -> Iterator[None]:
    """No automatic pass of Python's cyclic collector in the block (its first threshold 0); with freeze_what_was_made,
    what the block made is then moved out of its reach (gc.freeze: no pass over it, not even the young generation's,
    which would otherwise scan everything made in the block). gc.disable() or enable() by a library in the block
    stands (torchtitan's Trainer disables the collector and runs it every gc_freq steps itself)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(0)
    try:
        yield
    finally:
        if freeze_what_was_made:
            gc.freeze()
        gc.set_threshold(*thresholds)
