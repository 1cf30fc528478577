"""The fields of megatron-core's TransformerConfig (with ModelParallelConfig and MLATransformerConfig) and their
annotations, read from the installed sources with `ast`: the orchestrator checks backend.extra_args against them
without importing megatron-core or torch."""
from __future__ import annotations

import functools

from primus_hydra.backends.extra_args_types import dataclass_annotations

_SOURCES = {
    "megatron.core.model_parallel_config": ("ModelParallelConfig",),
    "megatron.core.transformer.transformer_config": ("TransformerConfig", "MLATransformerConfig"),
}


@functools.lru_cache(maxsize=1)
def transformer_config_types() -> dict[str, str]:
    """{field: annotation source} of those dataclasses; empty when megatron-core is not installed."""
    types: dict[str, str] = {}
    for module, classes in _SOURCES.items():
        found = dataclass_annotations(module)
        for name in classes:
            types.update(found.get(name, {}))
    return types
