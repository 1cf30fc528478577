"""The integration tier's `timing` tests measure time (tokens/s or a matmul's TFLOPS within a tolerance, a timeout
of a few seconds against a process's start-up): on a machine busy with other work they would fail for the load,
not for the code. `scripts/test.sh` runs the rest of the tier beside the Slurm tier and these alone afterwards:
PRIMUS_TEST_TIMING=skip leaves them out of a session, PRIMUS_TEST_TIMING=only keeps only them (both are reported
as deselected). Unset, as in `scripts/test.sh integration`, every test runs.

PRIMUS_TEST_SHARE=<folder> lets two sessions side by side share the tier, a module at a time (helpers/module_share.py,
a plugin of every tier)."""
from __future__ import annotations

import os

import pytest

TIMING_MODES = ("skip", "only")


def pytest_collection_modifyitems(config, items):
    mode = os.environ.get("PRIMUS_TEST_TIMING", "")
    if not mode:
        return
    if mode not in TIMING_MODES:
        raise pytest.UsageError(f"PRIMUS_TEST_TIMING={mode}: expected one of {', '.join(TIMING_MODES)} (or unset)")
    kept, left_out = [], []
    for item in items:
        timing = item.get_closest_marker("timing") is not None
        (kept if timing == (mode == "only") else left_out).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
