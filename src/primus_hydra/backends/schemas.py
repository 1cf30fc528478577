"""The registry of conf/backend/'s options, each with its schema (backends/<name>/schema.py), and the registration of
every schema in Hydra's ConfigStore: the root (config/schema.py), each task's (config/schema_task.py), each
backend's. It lives here, the lowest layer that sees them all; nothing it imports imports torch or a backend library.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from primus_hydra.config.schema import PrimusConfig
from primus_hydra.config.schema_hardware import HardwareConfig
from primus_hydra.config.schema_logger import LoggerConfig
from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.config.schema_task import TASK_SCHEMAS
from primus_hydra.config.stored_nodes import stored_when_loaded


class BackendSchemas(Mapping):
    """Each backend folder's schema: the BackendConfig subclass its `schema.py` defines, under the folder's name (a
    new backend is one folder; nothing here lists it). A folder's module is imported when its schema is first asked
    for: a command composes one backend, not six (~10 ms of dataclasses)."""

    def __init__(self) -> None:
        self._names = sorted(path.parent.name for path in Path(__file__).parent.glob("*/schema.py"))
        self._schemas: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._schemas:
            module = importlib.import_module(f"{__package__}.{name}.schema")
            defined = [value for value in vars(module).values() if isinstance(value, type)
                       and issubclass(value, BackendConfig) and value.__module__ == module.__name__]
            if len(defined) != 1:
                raise TypeError(f"{module.__file__}: defines {len(defined)} BackendConfig subclasses, not one")
            self._schemas[name] = defined[0]
        return self._schemas[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


BACKEND_SCHEMAS = BackendSchemas()
# the nodes typed by their selected option's schema, found by the option's `name`
SCHEMAS_BY_NAME = {"backend": BACKEND_SCHEMAS, "task": TASK_SCHEMAS}


def register_schemas() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent; called before composition)."""
    from hydra.core.config_store import ConfigStore  # workers load a composed config and never need it

    store = ConfigStore.instance()
    if "primus_schema.yaml" in store.repo:  # registered already in this process (converting them costs ~8 ms)
        return
    store.store(name="primus_schema", node=PrimusConfig, provider="primus_hydra")
    for group, schemas in SCHEMAS_BY_NAME.items():
        for name in schemas:  # a backend's module is imported when composition loads its schema
            store.store(group=f"schema/{group}", name=name, node=stored_when_loaded(partial(schemas.__getitem__, name)),
                        package=group, provider="primus_hydra")
    store.store(name="hardware", group="schema", node=HardwareConfig, package="hardware", provider="primus_hydra")
    store.store(name="logger", group="schema", node=LoggerConfig, package="logger", provider="primus_hydra")


def typed_config(raw: DictConfig) -> DictConfig:
    """A composed config read back from a file, typed as composition typed it: the root schema, and the backend and
    the task by their option's schema (a name no schema has stays as it is)."""
    raw = raw.copy()
    nodes = {group: raw.pop(group) for group in SCHEMAS_BY_NAME}
    cfg = OmegaConf.merge(OmegaConf.structured(PrimusConfig), raw)
    for group, node in nodes.items():
        schema = SCHEMAS_BY_NAME[group].get(str(node.get("name")))
        cfg[group] = OmegaConf.merge(OmegaConf.structured(schema), node) if schema else node
    return cfg
