"""backend=hummingbirdxt's schema (conf/backend/hummingbirdxt.yaml); stored as schema/backend/hummingbirdxt.
Imports no HummingbirdXT."""
from __future__ import annotations

from typing import Optional

from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.util.records import record


@record
class HummingbirdXTBackendConfig(BackendConfig):
    model_name_or_path: Optional[str] = None
