"""backend=megatron_bridge's schema (conf/backend/megatron_bridge.yaml); stored as schema/backend/megatron_bridge.
Imports no Megatron-Bridge."""
from __future__ import annotations

from typing import Optional

from primus_hydra.backends.megatron.schema import MegatronDataset
from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.util.records import record


@record
class MegatronBridgeBackendConfig(BackendConfig):
    recipe: Optional[str] = None  # Megatron-Bridge recipe name; null: derived from the model preset
    hf_model_id: Optional[str] = None
    # the trainer's batches, as backend=megatron's core trainer reads them: auto (megatron.core.datasets for text
    # and indexed data, the project's own for mock and tokens) | megatron | native (backend=torch's, for parity)
    dataset: MegatronDataset = MegatronDataset.auto
