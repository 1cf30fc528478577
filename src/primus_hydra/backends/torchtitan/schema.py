"""backend=torchtitan's schema (conf/backend/torchtitan.yaml); stored as schema/backend/torchtitan. No torchtitan
import."""
from __future__ import annotations

from typing import Optional

from primus_hydra.config.choices import Choice
from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.util.records import record


class TorchTitanJobFormat(Choice):
    auto = "auto"  # the installed torchtitan's: a config function for 0.3 and later, else TOML (and TOML without it)
    toml = "toml"  # torchtitan 0.2.x: a JobConfig file (--job.config_file)
    config_function = "config_function"  # torchtitan 0.3.x: a Python config function (--module ... --config ...)


class ActivationCheckpoint(Choice):
    none = "none"
    selective = "selective"
    full = "full"
    memory_budget = "memory_budget"


@record
class TorchTitanBackendConfig(BackendConfig):
    flavor: Optional[str] = None  # torchtitan model flavor name; null: derived from the model preset
    compile: bool = False
    activation_checkpoint: ActivationCheckpoint = ActivationCheckpoint.selective
    tokenizer_path: Optional[str] = None
    job_format: TorchTitanJobFormat = TorchTitanJobFormat.auto  # what task.dry_run=true writes for torchtitan
