"""The native model with given weights, asked to continue a prompt: what task=generate runs (the decoding loop is
backends/torch/generation.py; tasks reach the native backend through this folder)."""
from __future__ import annotations

from typing import Any, Iterable

import torch

from primus_hydra.backends.torch.generation import Generation, Sampling, generate
from primus_hydra.backends.torch.model import build_model_on_meta

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def generate_with_weights(model_cfg: Any, state_dict: dict, prompt_tokens: list[int], max_new_tokens: int,
                          sampling: Sampling, eos_token_ids: Iterable[int] = (), keep_logits: bool = False,
                          dtype: str = "fp32") -> Generation:
    """`state_dict`: native parameter names, whole. On the GPU when there is one."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model_on_meta(model_cfg).to_empty(device=device)
    model.load_state_dict(state_dict)
    model.to(DTYPES[dtype])
    return generate(model, prompt_tokens, max_new_tokens, sampling, eos_token_ids, keep_logits)
