"""task=import's checks of its experiments (each composed and validated: ~80 % of a file's import) in worker
processes, while this process reads and maps the next files; results come back in the files' order, so that what is
written, and every line printed, is what a one-process import gives.

The workers are forked from this process (its modules and caches loaded: nothing to start) and ignore Ctrl-C: the
import stops between files, after the checks under way. Where fork is not available, or one worker is asked for, the
checks run here, one after another.
"""
from __future__ import annotations

import collections
import multiprocessing
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

from primus_hydra.errors import PrimusError

Item = TypeVar("Item")
Check = Callable[..., Optional[str]]  # (its arguments) -> why it failed, or None
# checks queued per worker: deep enough that a run of files of one route (one model's experiments, one after another
# in a folder) keeps this process reading while that route's worker works through them; a check's result is taken
# as soon as it is the oldest and done, so results and lines still come out as the checks finish
IN_FLIGHT_PER_WORKER = 16
# task.workers=null's ceiling: a check takes about twice what reading and mapping a file takes here
# (docs/benchmarks.md), so past a few workers this process is the bound and more would only hold memory
MOST_WORKERS_BY_DEFAULT = 4


def checked_workers(value: Any) -> Optional[int]:
    """task.workers as given (None: one per CPU); a PrimusError (one line) for anything but an integer >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(value) < 1:
        raise PrimusError(f"task.workers={value}: at least 1 (null: one per CPU core)")
    return int(value)


def import_workers(wanted: Optional[int], files: int) -> int:
    """The processes that check `files` files: `wanted` (None: the CPUs this process may use, by its affinity, the
    cgroup's quota and PRIMUS_AUTO_VCPUS: the orchestrator's count, at most MOST_WORKERS_BY_DEFAULT), never more
    than the files."""
    from primus_hydra.orchestrator.host_probe import detect_cpus

    if wanted is None:
        cpus = len(detect_cpus(os.environ, Path("/sys/fs/cgroup"), Path("/proc"))[0])
        wanted = min(cpus, MOST_WORKERS_BY_DEFAULT)
    return max(1, min(wanted, files))


def checked_in_order(items: Iterable[Item], arguments: Callable[[Item], Optional[tuple]], check: Check,
                     workers: int, route: Callable[[Item], str] = str) -> Iterator[tuple[Item, Optional[str]]]:
    """(item, check(*arguments(item))) for each item, in order; an item whose arguments are None is not checked
    (None). Items are drawn from `items` as workers free up. Items of one `route` go to one worker, which keeps
    what their checks share (the composed config of an experiment's group choices); a route is given, when first
    seen, to the worker with the fewest checks under way."""
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for item in items:
            args = arguments(item)
            yield item, (check(*args) if args is not None else None)
        return
    context = multiprocessing.get_context("fork")
    pools = [ProcessPoolExecutor(1, mp_context=context, initializer=_ignore_ctrl_c) for _ in range(workers)]
    window: collections.deque[tuple[Item, Optional[Future], Optional[ProcessPoolExecutor]]] = collections.deque()
    routes: dict[str, ProcessPoolExecutor] = {}  # route -> its worker
    try:
        for item in items:
            args = arguments(item)
            if args is None:
                window.append((item, None, None))
            else:
                item_route = route(item)
                if item_route not in routes:
                    routes[item_route] = _least_busy(pools, window)
                window.append((item, routes[item_route].submit(check, *args), routes[item_route]))
            while window and (len(window) > IN_FLIGHT_PER_WORKER * workers or _finished(window[0])):
                yield _done(window.popleft())
        while window:
            yield _done(window.popleft())
    finally:  # done, or stopped (Ctrl-C, an error): the checks under way finish, the queued ones are dropped
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)


def _least_busy(pools: list[ProcessPoolExecutor], window: collections.deque) -> ProcessPoolExecutor:
    """The worker with the fewest checks under way (ties: the first)."""
    busy = [sum(worker is pool and not future.done() for _, future, worker in window) for pool in pools]
    return pools[busy.index(min(busy))]


def _finished(entry: tuple) -> bool:
    return entry[1] is None or entry[1].done()


def _done(entry: tuple) -> tuple[Any, Optional[str]]:
    item, future, _ = entry
    if future is None:
        return item, None
    try:
        return item, future.result()
    except Exception as error:  # noqa: BLE001 - a worker that died (killed, out of memory): this file's failure
        return item, f"its check failed in a worker process ({type(error).__name__}: {error})"


def _ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
