"""Composing the real conf/ with Hydra's Compose API (no CLI, no run dir), and running a composed job in-process."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Iterator

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, ListConfig

from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config.kept_nodes import group_options
from primus_hydra.config.paths import find_conf_dir

REPO = Path(__file__).resolve().parents[2]
CONF_DIR = Path(find_conf_dir())
GROUP_OPTIONS = group_options(CONF_DIR)  # `group=option` for every option of every group
PYTHON = sys.executable


def compose_primus(*overrides: str) -> DictConfig:
    """The composed config for these overrides, exactly as the CLI would compose it (without hydra.* resolved)."""
    register_schemas()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@contextlib.contextmanager
def hydras_own_composition() -> Iterator[None]:
    """Hydra's loader composes a run's config its own way, Hydra's config included (config/fast_composition.py's item
    10 off): the reference every faster path is held to."""
    from primus_hydra.config import fast_composition

    own = fast_composition._run_config_without_hydras_config
    fast_composition._run_config_without_hydras_config = lambda *args: None
    try:
        yield
    finally:
        fast_composition._run_config_without_hydras_config = own


def hydras_run_config(overrides: list[str], search_path_dir: str = str(CONF_DIR)) -> DictConfig:
    """The config Hydra's own loader composes for a run, its `hydra` node included."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(search_path_dir))
    with hydras_own_composition():
        return loader.load_configuration("config", overrides, RunMode.RUN)


def hydras_job_config(overrides: list[str], search_path_dir: str = str(CONF_DIR)) -> DictConfig:
    """The config Hydra's own loader composes for a run, its `hydra` node deleted (the job's config)."""
    from omegaconf import flag_override

    cfg = hydras_run_config(overrides, search_path_dir)
    with flag_override(cfg, ["struct", "readonly"], False):
        del cfg["hydra"]
    return cfg


def run_job(cfg: DictConfig, run_dir: Path):
    """task=train in this process, as the CLI runs it after composing: the job prepared, then run (a dry run or a
    job of one process runs here); returns what the task returns."""
    from primus_hydra.tasks.train import TrainTask
    from primus_hydra.util.environment import restored_environment

    # as tasks.run_task does: what the job set (platform.env) is undone after it, also where a module-scoped fixture
    # runs it (outside the per-test environment reset of tests/conftest.py)
    with restored_environment():
        return TrainTask(cfg, run_dir=Path(run_dir)).run()


def nodes(cfg, path: str = "") -> list[tuple]:
    """Every node of `cfg`: its path, class, schema, declared type, optional, flags and (for a leaf) its value."""
    node = cfg
    found = [(path, type(node).__name__, node._metadata.object_type, node._metadata.ref_type,
              node._metadata.optional, node._get_node_flag("struct"), node._get_node_flag("readonly"),
              None if isinstance(node, (DictConfig, ListConfig)) else node._value())]
    if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
        for key in node.keys():
            found += nodes(node._get_node(key), f"{path}.{key}")
    elif isinstance(node, ListConfig) and not node._is_none() and not node._is_missing():
        for index in range(len(node)):
            found += nodes(node._get_node(index), f"{path}[{index}]")
    return found


def kept_nodes_fit_this_installation() -> bool:
    """Whether src/primus_hydra/config/kept_nodes.pickle was made with this Python, Hydra and OmegaConf (else every
    command composes Hydra's way, and the tests of the kept nodes' use are skipped, saying so)."""
    from primus_hydra.config import kept_nodes

    kept = kept_nodes._kept_file()
    if kept is None:
        return False
    now = kept_nodes.fingerprint([], {})
    return all(kept[section]["fingerprint"][name] == now[name] for section in ("hydra", "schemas")
               for name in ("python", "hydra", "omegaconf"))


KEPT_NODES_REASON = ("kept_nodes.pickle was made with another Python, Hydra or OmegaConf than this one: commands "
                     "compose Hydra's way here (run scripts/make_kept_nodes.py)")
