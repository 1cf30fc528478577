"""The integration tier's `timing` tests measure time (tokens/s or a matmul's TFLOPS within a tolerance, a timeout
of a few seconds against a process's start-up): on a machine busy with other work they would fail for the load,
not for the code. `scripts/test.sh` runs the rest of the tier beside the Slurm tier and these alone afterwards:
PRIMUS_TEST_TIMING=skip leaves them out of a session, PRIMUS_TEST_TIMING=only keeps only them (both are reported
as deselected). Unset, as in `scripts/test.sh integration`, every test runs.

PRIMUS_TEST_SHARE=<folder> lets two sessions side by side share the tier, a module at a time (below)."""
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


# Two sessions side by side share the tier: with PRIMUS_TEST_SHARE=<a folder both see>, a session runs a whole
# module at a time, the next one that no session has taken yet (it takes a module by making its entry in the folder),
# the modules with the most `slow` tests first; a session reports only what it ran. Unset, the tier runs as usual.
def _modules_by_weight(items: list) -> dict[str, list]:
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    slow = {name: sum(item.get_closest_marker("slow") is not None for item in found) for name, found in modules.items()}
    return {name: modules[name] for name in sorted(modules, key=lambda name: -slow[name])}


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    share = os.environ.get("PRIMUS_TEST_SHARE", "")
    if not share or session.config.option.collectonly:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    waiting = _modules_by_weight(session.items)

    def take() -> list:
        while waiting:
            name = next(iter(waiting))
            found = waiting.pop(name)
            try:
                os.mkdir(os.path.join(share, name.replace("/", "__")))
            except FileExistsError:
                continue  # the other session runs it
            return found
        return []

    module = take()
    while module:
        following: list = []
        for index, item in enumerate(module):
            if index + 1 < len(module):
                next_item = module[index + 1]
            else:
                following = take()  # before the last test: its module's fixtures end only if the next is elsewhere
                next_item = following[0] if following else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=next_item)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        module = following
    return True
