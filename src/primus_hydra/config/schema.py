"""The root schema.

config.yaml lists `primus_schema` first in its defaults, so every group option merges into a typed node:
an unknown key, a wrong type or an invalid enum value fails at composition with the full key path. The backend and
the task are typed by their option's own schema (schema/backend/<name>, schema/task/<name>), which the option's file
names in its defaults; backends/schemas.py registers them all in Hydra's ConfigStore.
"""
from __future__ import annotations

from dataclasses import field
from typing import Any

from omegaconf import MISSING

from primus_hydra.config import resolvers  # noqa: F401  (registers ${primus.times:...})
from primus_hydra.config.schema_hardware import HardwareConfig
from primus_hydra.config.schema_logger import LoggerConfig
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.config.schema_module import ModuleConfig
from primus_hydra.config.schema_run import LaunchConfig, PatchesConfig, PlatformConfig, SweepConfig
from primus_hydra.util.records import record


@record
class PrimusConfig:
    platform: PlatformConfig = MISSING
    module: ModuleConfig = MISSING
    model: ModelConfig = MISSING
    backend: Any = MISSING  # typed by the selected option's schema (schema/backend/<name>)
    task: Any = MISSING  # typed by the selected option's schema (schema/task/<name>)
    hardware: HardwareConfig = MISSING  # task=projection's device (conf/hardware/)
    logger: LoggerConfig = MISSING  # where metrics go besides metrics.jsonl (conf/logger/)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    patches: PatchesConfig = field(default_factory=PatchesConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
