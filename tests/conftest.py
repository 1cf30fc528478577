"""Fixtures every tier shares, and the tiers as markers: tests/unit (no subprocess, no training), tests/integration
(real runs, several processes), tests/slurm (the local Slurm cluster). `scripts/test.sh unit` runs the first."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.compose import compose_primus

TIERS = ("unit", "integration", "slurm")
pytest_plugins = ["helpers.module_share"]  # PRIMUS_TEST_SHARE: two sessions side by side share a tier


def pytest_collection_modifyitems(items):
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture
def compose_config():
    return compose_primus


@pytest.fixture(autouse=True)
def _isolated_patch_registry():
    """Each test starts from the built-in patches only; what a test registers is dropped after it.

    Built-in patch modules are imported first, so the snapshot holds them (a cached module never registers twice).
    """
    import importlib
    import pkgutil

    import primus_hydra.backends
    from primus_hydra.patches.registry import REGISTRY

    for backend in pkgutil.iter_modules(primus_hydra.backends.__path__):
        if backend.ispkg and importlib.util.find_spec(f"primus_hydra.backends.{backend.name}.patches"):
            importlib.import_module(f"primus_hydra.backends.{backend.name}.patches")

    saved = dict(REGISTRY._patches), set(REGISTRY.loaded_modules)
    REGISTRY.load_errors.clear()
    yield
    REGISTRY._patches.clear()
    REGISTRY._patches.update(saved[0])
    REGISTRY.loaded_modules.clear()
    REGISTRY.loaded_modules.update(saved[1])
    REGISTRY.load_errors.clear()


@pytest.fixture(autouse=True)
def _isolated_environment():
    """A job run in this process (its platform.env block, the inductor cache, a secret's hand-off variable) leaves
    os.environ as it found it, so a later test's subprocesses inherit the developer's environment, not a job's."""
    import os

    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)
