"""backend=maxtext's schema (conf/backend/maxtext.yaml); stored as schema/backend/maxtext. Imports neither MaxText
nor JAX."""
from __future__ import annotations

from typing import Optional

from primus_hydra.config.choices import Choice
from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.util.records import record


class AttentionKernel(Choice):  # the choices listed in MaxText's base.yml
    autoselected = "autoselected"
    dot_product = "dot_product"
    flash = "flash"
    cudnn_flash_te = "cudnn_flash_te"


class RematPolicy(Choice):  # the choices listed in MaxText's base.yml (minimal_flash: newer MaxText, Primus's default)
    minimal_with_context = "minimal_with_context"
    minimal = "minimal"
    minimal_flash = "minimal_flash"
    save_dot_with_context_except_mlp = "save_dot_with_context_except_mlp"
    save_dot_except_mlpwi = "save_dot_except_mlpwi"
    save_dot_except_mlp = "save_dot_except_mlp"
    save_qkv_proj = "save_qkv_proj"
    qkv_proj_offloaded = "qkv_proj_offloaded"
    custom = "custom"
    minimal_offloaded = "minimal_offloaded"
    save_out_proj = "save_out_proj"
    full = "full"


@record
class MaxTextBackendConfig(BackendConfig):
    model_name: Optional[str] = None  # MaxText model name; null: derived from the model preset
    attention: AttentionKernel = AttentionKernel.dot_product
    remat_policy: RematPolicy = RematPolicy.full
