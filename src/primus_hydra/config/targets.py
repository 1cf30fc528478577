"""`_target_` strings to classes: "package.module.Class" imported on demand.

The same resolution as hydra.utils.get_class, without importing Hydra's instantiate machinery, so that worker
processes (which never compose) start faster."""
from __future__ import annotations

import importlib
from typing import Optional

from primus_hydra.errors import PrimusError


def load_target(path: str, key: str = "_target_") -> type:
    module_name, _, attribute = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise PrimusError(f"{key}={path}: cannot import it ({type(error).__name__}: {error})") from error


def task_class_of(config) -> Optional[type]:
    """The class of a primus-hydra config's task (task._target_); None for another Hydra app's config."""
    from omegaconf import OmegaConf

    target = OmegaConf.select(config, "task._target_", default=None)
    return load_target(target, "task._target_") if target else None
