"""task=import's checks in worker processes (tasks/import_checks.py): how many, results in the items' order and as
soon as they are done, one worker per route (a new one to the least busy), and a check that fails in its worker as
that item's line."""
from __future__ import annotations

import os
import time

import pytest

from primus_hydra.errors import PrimusError
from primus_hydra.tasks.import_checks import checked_in_order, checked_workers, import_workers


def where_checked(number: int) -> str:
    time.sleep(0.01 * (number % 3))  # later items may finish first in another worker
    return f"{number}@{os.getpid()}"


def refusing_two(number: int) -> str:
    if number == 2:
        raise ValueError("two")
    return "fine"


@pytest.mark.parametrize("cpus, files, wanted, expected", [
    ("16", 100, None, 4), ("3", 100, None, 3), ("3", 2, None, 2), ("1", 100, None, 1), ("2", 100, 8, 8), ("2", 5, 8, 5),
])
def test_the_default_is_one_worker_per_cpu_up_to_four(monkeypatch, cpus, files, wanted, expected):
    monkeypatch.setenv("PRIMUS_AUTO_VCPUS", cpus)
    assert import_workers(wanted, files) == expected


@pytest.mark.parametrize("value", [0, -1, "0", True, "many"])
def test_a_number_of_workers_below_one_is_one_line(value):
    with pytest.raises(PrimusError, match=r"^task.workers=.*: at least 1 \(null: one per CPU core\)$"):
        checked_workers(value)


def test_null_and_a_number_are_taken():
    assert checked_workers(None) is None and checked_workers(3) == 3 and checked_workers("2") == 2


@pytest.mark.parametrize("workers", [1, 3])
def test_results_come_back_in_the_items_order_one_worker_per_route(workers):
    items = list(range(24))
    checked = list(checked_in_order(items, lambda number: (number,) if number % 5 else None, where_checked, workers,
                                    route=lambda number: str(number % 4)))
    assert [item for item, _ in checked] == items
    results = dict(checked)
    assert [number for number in items if results[number] is None] == [0, 5, 10, 15, 20]  # no arguments: unchecked
    pids = {number: results[number].split("@")[1] for number in items if number % 5}
    assert all(results[number].startswith(f"{number}@") for number in pids)
    for route in range(4):  # a route's checks share one worker
        assert len({pid for number, pid in pids.items() if number % 4 == route}) == 1
    if workers == 1:
        assert set(pids.values()) == {str(os.getpid())}  # checked here
    else:
        assert len(set(pids.values())) > 1 and str(os.getpid()) not in pids.values()


def slow_where_checked(route: str) -> str:
    time.sleep(0.3)
    return f"{route}@{os.getpid()}"


def test_a_new_route_goes_to_the_worker_with_the_fewest_checks_under_way():
    # each of these names hashes to the same of two workers (a fixed hash would check them one after another)
    routes = ["llama", "qwen", "mixtral", "deepseek"]
    checked = dict(checked_in_order(routes, lambda route: (route,), slow_where_checked, 2, route=str))
    pids = [checked[route].split("@")[1] for route in routes]
    assert pids[0] != pids[1] and len(set(pids)) == 2


def test_a_result_comes_back_as_soon_as_it_is_the_oldest_and_done():
    drawn = []

    def items():
        for number in range(40):
            drawn.append(number)
            time.sleep(0.05)  # reading and mapping a file, while the workers check the earlier ones
            yield number

    first = next(iter(checked_in_order(items(), lambda number: (number,), where_checked, 2)))
    assert first[0] == 0 and len(drawn) < 16, drawn  # not held until the window of checks under way is full


def test_a_check_that_fails_in_its_worker_is_that_items_line():
    checked = dict(checked_in_order([1, 2, 3], lambda number: (number,), refusing_two, 2))
    assert checked == {1: "fine", 2: "its check failed in a worker process (ValueError: two)", 3: "fine"}


def collector_thresholds(name: str, folder) -> str:
    import gc

    return f"thresholds {gc.get_threshold()}"


@pytest.mark.parametrize("workers", [1, 2])
def test_the_collector_runs_less_often_while_files_are_imported_and_as_before_after(tmp_path, monkeypatch, workers):
    import gc

    from helpers.primus_tree import write_primus_tree
    from primus_hydra.tasks import import_session

    tree = write_primus_tree(tmp_path / "primus")
    monkeypatch.setattr(import_session, "composition_failure", collector_thresholds)  # its answer: the thresholds
    before = gc.get_threshold()
    results = import_session.import_files(sorted((tree / "examples").rglob("*.yaml"))[:3], tree / "examples", tree,
                                          tmp_path / "out", {}, workers)
    assert gc.get_threshold() == before
    checked = [result.failure for result in results if "thresholds" in result.failure]
    assert checked and all(str(import_session.GC_THRESHOLDS) in failure for failure in checked)  # workers inherit it
