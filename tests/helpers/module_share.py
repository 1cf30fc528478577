"""Two pytest sessions side by side share a tier (scripts/test.sh: the unit tier's two sessions, the integration
tier's two): with PRIMUS_TEST_SHARE=<a folder both see>, a session runs a whole module at a time, the next one that
no session has taken yet (it takes a module by making its entry in the folder), the modules with the most `slow`
tests first, then the most tests, so that the last ones taken are short and the two sessions end together; a session
reports only what it ran. Unset, the tier runs as usual. Loaded by tests/conftest.py for every tier."""
from __future__ import annotations

import os

import pytest


def _modules_by_weight(items: list) -> dict[str, list]:
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    slow = {name: sum(item.get_closest_marker("slow") is not None for item in found) for name, found in modules.items()}
    return {name: modules[name] for name in sorted(modules, key=lambda name: (-slow[name], -len(modules[name])))}


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
