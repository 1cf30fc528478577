"""Which backend builds which architecture choice of the canonical model: hybrid (state-space) layer patterns,
NoPE and LayerNorm are built by megatron-core only (backend=megatron, and backend=megatron_bridge through Bridge's
providers), and its hybrid layers run only on GPU kernels.

One line per refusal, naming the key, its value and what to do. Called once per job when it is prepared
(orchestrator/prepare.py), for every backend, before anything is translated or started.
"""
from __future__ import annotations

from functools import reduce
from typing import Any, Optional

from primus_hydra.backends.traits import BackendTraits
from primus_hydra.config.schema_model import GEMMA4_FAMILY, GEMMA4_LAYERS_OFF, GPT_OSS_LAYERS_OFF
from primus_hydra.config.values import override_text

# the backends whose model is megatron-core's (MambaModel for a hybrid pattern)
MEGATRON_CORE_BACKENDS = ("megatron", "megatron_bridge")
MEGATRON_CORE_MOE_BACKENDS = ("megatron", "megatron_bridge")  # megatron-core's MoE layers, whichever front end
# what each mixer's layers need beyond megatron-core: kernels that exist for GPUs only
MIXER_KERNELS = {"mamba2": "mamba_ssm and causal-conv1d (CUDA/Triton kernels)",
                 "gated_delta_net": "flash-linear-attention's Triton kernels",
                 "kimi_delta_attention": "flash-linear-attention's Triton kernels"}


def architecture_failures(model: Any, backend: str, trains: bool, runs_on_gpu: Optional[bool],
                          traits: BackendTraits) -> list[str]:
    """What `backend` cannot build of `model`; with trains, also what it cannot run where the job runs."""
    return (_moe_layer_failures(model, backend, traits) + _gpt_oss_failures(model, backend, traits)
            + _gemma4_failures(model, backend, traits) + _layer_failures(model, backend, trains, runs_on_gpu))


def _features_on(model: Any, off: dict) -> list[tuple[str, str]]:
    values = ((key, reduce(getattr, key.split("."), model)) for key in off)
    return [(key, override_text(value)) for key, value in values if value != off[key]]


def gpt_oss_features(model: Any) -> list[tuple[str, str]]:
    """(key, value as an override writes it) of each gpt-oss layer feature `model` turns on (not a Gemma 4 model's
    sliding window: gemma4_features has it)."""
    features = _features_on(model, GPT_OSS_LAYERS_OFF)
    if str(model.family) == GEMMA4_FAMILY:
        features = [(key, value) for key, value in features if key != "sliding_window"]
    return features


def gemma4_features(model: Any) -> list[tuple[str, str]]:
    """(key, value as an override writes it) of Gemma 4's layer, family included, that `model` turns on (a Gemma 4
    model's sliding window is its own, not gpt-oss's)."""
    family = []
    if str(model.family) == GEMMA4_FAMILY:
        family = [("family", GEMMA4_FAMILY)] + _features_on(model, {"sliding_window": None})
    return family + _features_on(model, GEMMA4_LAYERS_OFF)


def _gemma4_failures(model: Any, backend: str, traits: BackendTraits) -> list[str]:
    return _layer_family_failures(gemma4_features(model), traits.gemma4_layers, "Gemma 4's", model, backend,
                                  "maxtext does (its gemma4 decoder block)")


def _gpt_oss_failures(model: Any, backend: str, traits: BackendTraits) -> list[str]:
    return _layer_family_failures(gpt_oss_features(model), traits.gpt_oss_layers, "gpt-oss's", model, backend,
                                  "torchtitan does (its gpt_oss model)")


def _layer_family_failures(features: list[tuple[str, str]], built: bool, whose: str, model: Any, backend: str,
                           builder: str) -> list[str]:
    """One line naming each of a model family's layer features that `backend` does not build."""
    if built or not features:
        return []
    keys = ", ".join(f"model.{key}={value}" for key, value in features)
    return [f"{keys}: backend={backend} does not build {whose} layers (model={model.name}); backend={builder}, or "
            f"unset them"]


def _moe_layer_failures(model: Any, backend: str, traits: BackendTraits) -> list[str]:
    moe = model.moe
    if not moe.num_experts:
        return []
    failures = []
    if not traits.interleaved_moe:
        failures += [f"model.moe.{key}={value}: backend={backend} does not translate Llama 4's MoE layers; "
                     f"backend=torch, megatron, megatron_bridge and torchtitan do (model={model.name})"
                     for key, value, plain in (("interleave_step", moe.interleave_step, 1),
                                               ("score_before_experts", override_text(moe.score_before_experts), "false"))
                     if value != plain]
    elif moe.score_before_experts and moe.top_k != 1 and backend in MEGATRON_CORE_MOE_BACKENDS:
        failures.append(f"model.moe.score_before_experts=true with model.moe.top_k={moe.top_k}: megatron-core weights "
                        f"the expert's input (moe_apply_probs_on_input) with one expert per token only; set "
                        f"model.moe.top_k=1")
    return failures


def _layer_failures(model: Any, backend: str, trains: bool, runs_on_gpu: Optional[bool]) -> list[str]:
    pattern = model.hybrid.layer_pattern
    if backend not in MEGATRON_CORE_BACKENDS:
        failures = [f"model.{key}={value}: backend={backend} builds {allowed} only; backend=megatron and "
                    f"megatron_bridge build {value} (model={model.name})"
                    for key, value, allowed in (("normalization", model.normalization, "rmsnorm"),
                                                ("position_embedding", model.position_embedding, "rope"))
                    if str(value) != allowed]
        if pattern is not None:
            failures.append(f"model.hybrid.layer_pattern={pattern}: backend={backend} builds transformers only; a "
                            f"hybrid (state-space) model runs on backend=megatron or megatron_bridge (megatron-core's "
                            f"MambaModel)")
        return failures
    if pattern is None or not trains:
        return []
    mixer = str(model.hybrid.mixer)
    if "M" in str(pattern) and not runs_on_gpu:
        return [f"model.hybrid.mixer={mixer} (model.hybrid.layer_pattern={pattern}): its layers need {MIXER_KERNELS[mixer]}, "
                f"which run on GPUs only; run it on a GPU machine, or use task.dry_run=true here"]
    if backend == "megatron_bridge":  # Bridge's MambaModelProvider: megatron-core's Transformer Engine stack
        return [] if runs_on_gpu else [
            f"model.hybrid.layer_pattern={pattern}: backend=megatron_bridge builds a hybrid model with Bridge's "
            f"MambaModelProvider, whose megatron-core stack is Transformer Engine's (GPUs only); run it on a GPU "
            f"machine, or use task.dry_run=true here"]
    return [f"model.hybrid.layer_pattern={pattern}: backend={backend}'s trainers build GPT models; a hybrid model trains "
            f"with Megatron-LM's own pretrain_mamba.py, given the arguments a dry run exports (backend_args.yaml), or "
            f"with backend=megatron_bridge (Bridge's MambaModelProvider) on GPUs"]
