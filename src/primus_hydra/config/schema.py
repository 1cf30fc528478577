"""The root schema and its registration in Hydra's ConfigStore.

config.yaml lists `primus_schema` first in its defaults, so every group option merges into a typed node:
an unknown key, a wrong type or an invalid enum value fails at composition with the full key path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from primus_hydra.config import resolvers  # noqa: F401  (registers ${primus.times:...})
from primus_hydra.config.schema_hardware import HardwareConfig
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.config.schema_module import ModuleConfig
from primus_hydra.config.schema_run import (
    HummingbirdXTBackendConfig,
    LaunchConfig,
    MaxTextBackendConfig,
    MegatronBackendConfig,
    MegatronBridgeBackendConfig,
    PatchesConfig,
    PlatformConfig,
    SweepConfig,
    TaskConfig,
    TorchBackendConfig,
    TorchTitanBackendConfig,
)


@dataclass
class PrimusConfig:
    platform: PlatformConfig = MISSING
    module: ModuleConfig = MISSING
    model: ModelConfig = MISSING
    backend: Any = MISSING  # typed by the selected option's schema (schema/backend/<name>)
    task: TaskConfig = MISSING
    hardware: HardwareConfig = MISSING  # task=projection's device (conf/hardware/)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    patches: PatchesConfig = field(default_factory=PatchesConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


BACKEND_SCHEMAS = {
    "torch": TorchBackendConfig,
    "megatron": MegatronBackendConfig,
    "torchtitan": TorchTitanBackendConfig,
    "maxtext": MaxTextBackendConfig,
    "megatron_bridge": MegatronBridgeBackendConfig,
    "hummingbirdxt": HummingbirdXTBackendConfig,
}


def register_schemas() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent; called before composition)."""
    from hydra.core.config_store import ConfigStore  # workers load a composed config and never need it

    store = ConfigStore.instance()
    if "primus_schema.yaml" in store.repo:  # registered already in this process (converting them costs ~8 ms)
        return
    store.store(name="primus_schema", node=PrimusConfig, provider="primus_hydra")
    for name, schema in BACKEND_SCHEMAS.items():
        store.store(group="schema/backend", name=name, node=schema, package="backend", provider="primus_hydra")
    store.store(name="hardware", group="schema", node=HardwareConfig, package="hardware", provider="primus_hydra")
