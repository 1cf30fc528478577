"""megatron-core's GPTModel for the translated arguments: Transformer Engine's layer spec when
backend.transformer_impl=transformer_engine and TE imports, megatron-core's local spec otherwise (the CPU)."""
from __future__ import annotations

import importlib.util
import logging
from typing import Any, Optional

from primus_hydra.backends.megatron.core_config import gpt_model_kwargs, transformer_config

log = logging.getLogger("primus_hydra.megatron")


def uses_transformer_engine(args: dict, device_type: str) -> bool:
    wanted = args.get("transformer_impl") == "transformer_engine"
    return wanted and device_type == "cuda" and importlib.util.find_spec("transformer_engine") is not None


def layer_spec(config: Any, use_te: bool, vp_stage: Optional[int] = None) -> Any:
    """The decoder block spec: MoE layers where moe_layer_freq says, the MLA attention where configured."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec

    if config.num_moe_experts:  # per-layer specs (dense and MoE layers mixed), sliced to this pipeline stage
        return get_gpt_decoder_block_spec(config, use_transformer_engine=use_te, normalization=config.normalization,
                                          vp_stage=vp_stage)
    if use_te:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

        return get_gpt_layer_with_transformer_engine_spec(qk_layernorm=config.qk_layernorm,
                                                          multi_latent_attention=config.multi_latent_attention)
    return get_gpt_layer_local_spec(qk_layernorm=config.qk_layernorm, multi_latent_attention=config.multi_latent_attention,
                                    normalization=config.normalization)


def build_gpt_model(args: dict, *, device_type: str, pre_process: bool = True, post_process: bool = True,
                    vp_stage: Optional[int] = None, params_dtype: Any = None, count_only: bool = False) -> Any:
    """GPTModel for this rank (its tp/pp/ep share, from megatron-core's parallel state). `count_only` builds the
    parameters only: multi-latent attention's kernel, which megatron-core 0.16 has only in Transformer Engine and
    which holds no parameters, is left out."""
    from megatron.core.models.gpt import GPTModel

    use_te = uses_transformer_engine(args, device_type)
    config = transformer_config(args, fused=use_te, use_cpu_initialization=device_type != "cuda", params_dtype=params_dtype)
    spec = layer_spec(config, use_te, vp_stage)
    if count_only and config.multi_latent_attention and not use_te:
        spec = _without_core_attention(spec)
    return GPTModel(config=config, transformer_layer_spec=spec, pre_process=pre_process,
                    post_process=post_process, vp_stage=vp_stage, **gpt_model_kwargs(args))


def _without_core_attention(spec: Any) -> Any:
    from megatron.core.transformer import multi_latent_attention
    from megatron.core.transformer.identity_op import IdentityOp

    if importlib.util.find_spec("transformer_engine") is None:  # its TE names are MagicMock stand-ins without TE
        multi_latent_attention.HAVE_TE = False

    for layer in getattr(spec, "layer_specs", None) or [spec]:
        layer.submodules.self_attention.submodules.core_attention = IdentityOp
    return spec


def count_on_meta(args: dict) -> int:
    """The parameters of the whole model, built on the meta device in a one-process parallel state (the caller
    holds a gloo group of one): what `count_parameters` must equal. The routers' expert biases count as the
    checkpoints of these models count them, though megatron-core keeps them as buffers."""
    import torch

    with torch.device("meta"):
        model = build_gpt_model(args, device_type="meta", count_only=True)
    biases = sum(buffer.numel() for name, buffer in model.named_buffers() if name.endswith("router.expert_bias"))
    return sum(param.numel() for param in model.parameters()) + biases
