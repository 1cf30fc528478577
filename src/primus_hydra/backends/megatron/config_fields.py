"""The fields of megatron-core's TransformerConfig (with ModelParallelConfig and MLATransformerConfig), read from
the installed sources with `ast`: the orchestrator checks backend.extra_args against them without importing
megatron-core or torch."""
from __future__ import annotations

import ast
import functools

from primus_hydra.backends.base import find_module_spec

_SOURCES = {
    "megatron.core.model_parallel_config": ("ModelParallelConfig",),
    "megatron.core.transformer.transformer_config": ("TransformerConfig", "MLATransformerConfig"),
}


@functools.lru_cache(maxsize=1)
def transformer_config_fields() -> frozenset[str]:
    """Every annotated field of those dataclasses; empty when megatron-core is not installed."""
    fields: set[str] = set()
    for module, classes in _SOURCES.items():
        spec = find_module_spec(module)
        if spec is None or not spec.origin:
            continue
        with open(spec.origin, encoding="utf-8") as source:
            tree = ast.parse(source.read())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name in classes:
                fields.update(item.target.id for item in node.body
                              if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))
    return frozenset(fields)
