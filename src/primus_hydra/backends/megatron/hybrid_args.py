"""The canonical model's architecture choices beyond a RoPE + RMSNorm transformer, as Megatron-LM arguments:
the norm, NoPE, and a hybrid (state-space) model for megatron-core's MambaModel (Megatron-LM's pretrain_mamba.py:
--hybrid-override-pattern and the Mamba / linear-attention sizes, which are TransformerConfig fields)."""
from __future__ import annotations

from typing import Any

from primus_hydra.backends.translation_sections import translation_section

# model.normalization -> Megatron's --normalization
NORMALIZATION = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
HYBRID_SIZES = ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads", "linear_conv_kernel_dim",
                "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads")


@translation_section
def architecture_variant_args(model: Any) -> dict:
    """--normalization, --position-embedding-type, and for a hybrid model its pattern and layer sizes."""
    args = {"normalization": NORMALIZATION[str(model.normalization)],
            "position_embedding_type": str(model.position_embedding)}
    hybrid = model.hybrid
    if hybrid.layer_pattern is None:
        return args
    args.update({"is_hybrid_model": True, "hybrid_override_pattern": str(hybrid.layer_pattern),
                 # the pattern decides every layer; Megatron's ratios would allocate them otherwise
                 "hybrid_attention_ratio": 0.0, "hybrid_mlp_ratio": 0.0})
    args.update({name: hybrid[name] for name in HYBRID_SIZES})
    return args
