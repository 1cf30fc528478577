"""Shared fixtures: compose the real conf/ with Hydra's compose API (no CLI, no run dir side effects)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.schema import register_schemas

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = Path(find_conf_dir())
PYTHON = sys.executable


def compose_primus(*overrides: str) -> DictConfig:
    """The composed config for these overrides, exactly as the CLI would compose it (without hydra.* resolved)."""
    register_schemas()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


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
