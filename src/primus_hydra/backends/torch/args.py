"""What the native trainer reads: the typed config sections (the schema's own dataclasses, made by
OmegaConf.to_object) and the job's layout, in one frozen object. A build_args patch that changes something makes
a changed copy with dataclasses.replace (see patches.py)."""
from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from typing import Any, Optional

from primus_hydra.config.layout import ParallelLayout
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.config.schema_module import ModuleConfig
from primus_hydra.config.schema_run import Device
from primus_hydra.util.records import record


@record(frozen=True)
class TorchTrainingArgs:
    model: ModelConfig
    module: ModuleConfig  # module.checkpoint.dir is resolved (default: <run_dir>/checkpoints)
    layout: ParallelLayout
    device: Device
    peak_tflops_per_device: Optional[float]  # None: measured on the CPU, unknown on GPUs
    timeout_s: float  # collective timeout (launch.timeout_s)
    deterministic: bool
    num_threads: Optional[int]
    measure_memory: bool = False  # each rank's peak memory in metrics.jsonl (backends/common/peak_memory.py)

    @classmethod
    def from_plain(cls, plain: dict) -> TorchTrainingArgs:
        """The arguments from their plain form in a job config (config.values.to_plain's), typed by the schema."""
        return _typed(cls, plain)

    @property
    def lr_decay_iters(self) -> int:
        return self.module.lr_decay_iters or self.module.train_iters


def _typed(kind: Any, value: Any) -> Any:
    """`value` (plain) as `kind`: dataclasses field by field, enums by their value, Optional[X] as X or None; the
    rest as it is (the schema's own checks ran when the job was prepared). A direct walk: well under a millisecond,
    where OmegaConf's structured merge takes ~50 ms of a worker's start."""
    if value is None:
        return None
    if dataclasses.is_dataclass(kind):
        hints = _field_types(kind)
        return kind(**{name: _typed(hints[name], item) for name, item in value.items()})
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value)
    if typing.get_origin(kind) is typing.Union:
        typed_members = [member for member in typing.get_args(kind) if member is not type(None)]
        return _typed(typed_members[0], value) if len(typed_members) == 1 else value
    return value


@functools.lru_cache(maxsize=None)
def _field_types(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)
