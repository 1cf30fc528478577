"""The check that matters for an import: the backend arguments a dry run of the imported experiment exports carry
exactly the values Primus's own loader resolves, for every model-shape, batch, sequence, iteration, lr-schedule,
parallel, precision and data key (in the backend's native names). Values Primus leaves to the backend (null, -1)
are compared with what the backend derives from them."""
from __future__ import annotations

from primus_hydra.backends.maxtext.keys import MAXTEXT_KEYS
from primus_hydra.backends.megatron.keys import MEGATRON_KEYS
from primus_hydra.backends.megatron_bridge.keys import MEGATRON_BRIDGE_KEYS
from primus_hydra.backends.torchtitan.keys import TORCHTITAN_KEYS
from primus_hydra.migrate.emit import same_value
from primus_hydra.migrate.mapping import GPUS_PER_NODE
from primus_hydra.migrate.models import (
    MEGATRON_ARCHITECTURE,
    TRAINING_CHOICES,
    megatron_architecture,
    normalized,
    same_normalized,
)
from primus_hydra.migrate.pipeline_split import ACCOUNT, FIRST, LAST, LAYOUT, megatron_stages
from primus_hydra.migrate.primus_yaml import dotted_get as _get
from primus_hydra.migrate.primus_yaml import plain

# the keys of the backend's table marked checked, and those the backend derives from several canonical keys
MEGATRON_CHECKED = MEGATRON_KEYS.checked() + ("lr_decay_style", "bf16", "fp16", "mock_data", FIRST, LAST)
TORCHTITAN_CHECKED = TORCHTITAN_KEYS.checked() + (
    "training.global_batch_size", "training.mixed_precision_param", "lr_scheduler.decay_type",
    "lr_scheduler.min_lr_factor", "lr_scheduler.decay_ratio", "parallelism.data_parallel_shard_degree",
    "parallelism.data_parallel_replicate_degree", "model.name", "model.flavor")
MAXTEXT_CHECKED = MAXTEXT_KEYS.checked() + ("per_device_batch_size", "ici_tensor_parallelism",
                                             "ici_pipeline_parallelism", "dtype", "dataset_type")
# Megatron-Bridge: Primus's flat names (Megatron's) -> this project's ConfigContainer sections
BRIDGE_CHECKED = {MEGATRON_KEYS.native(key.canonical): key.native for key in MEGATRON_BRIDGE_KEYS if key.checked}



def mismatches(framework: str, primus: dict, exported: dict, gpus_per_node: int = GPUS_PER_NODE,
               passed: tuple = ()) -> list[str]:
    """`key: primus=<value> exported=<value>` for every checked key that differs, and for every key passed through
    (`passed`: exactly Primus's value and type, as the backend receives it)."""
    primus = plain(primus)
    checker = {"megatron": _megatron, "torchtitan": _torchtitan, "maxtext": _maxtext,
               "megatron_bridge": _bridge}[framework]
    found = [f"{key}: primus={want!r} exported={got!r}" for key, want, got in checker(primus, exported, gpus_per_node)
             if not same_normalized(want, got)]
    for key in passed:
        want, got = _get(primus, key), _get(exported, key, _MISSING)
        if not same_value(want, got):
            found.append(f"{key}: primus={want!r} exported={'(missing)' if got is _MISSING else repr(got)}")
    return found


_MISSING = object()


def _megatron(primus: dict, exported: dict, gpus_per_node: int):
    if "norm_epsilon" not in exported:  # patch megatron.args.layernorm_epsilon (megatron-core >= 0.16) renames it
        exported = {**exported, "norm_epsilon": exported.get("layernorm_epsilon")}
    tp = normalized(primus.get("tensor_model_parallel_size")) or 1
    derived = {"lr_decay_iters": primus.get("lr_decay_iters") or primus.get("train_iters"),
               # Megatron turns sequence parallelism off without tensor parallelism
               "sequence_parallel": bool(primus.get("sequence_parallel")) and tp > 1,
               "fp16": bool(primus.get("fp16")), "bf16": bool(primus.get("bf16")),
               "mock_data": bool(primus.get("mock_data"))}
    for key in MEGATRON_CHECKED:
        if key not in primus or (primus[key] is None and key not in derived):
            continue
        yield key, derived.get(key, primus.get(key)), exported.get(key)
    if "eval_iters" in primus:  # Megatron's eval_iters=0: no evaluation (the interval and split then mean nothing)
        yield "eval_iters", primus["eval_iters"] or 0, exported.get("eval_iters")
        if primus["eval_iters"] and primus.get("eval_interval"):
            yield "eval_interval", primus["eval_interval"], exported.get("eval_interval")
            if primus.get("split"):
                yield "split", primus["split"], exported.get("split")
    if any(primus.get(key) for key in (LAYOUT, *ACCOUNT)) and primus.get("num_layers"):
        # the split itself: the import holds a layout or Megatron's accounting as other keys
        yield "layers per pipeline stage", megatron_stages(primus), megatron_stages(exported)
    want, got = megatron_architecture(primus), megatron_architecture(exported)
    for key in MEGATRON_ARCHITECTURE + TRAINING_CHOICES:
        if want[key] is not None:
            yield key, want[key], got[key]


def _torchtitan(primus: dict, exported: dict, gpus_per_node: int):
    others = 1
    for key in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree"):
        others *= int(_get(primus, f"parallelism.{key}") or 1)
    replicate = int(_get(primus, "parallelism.data_parallel_replicate_degree") or 1)
    shard = _get(primus, "parallelism.data_parallel_shard_degree")
    shard = gpus_per_node // (others * replicate) if shard in (None, -1) else int(shard)
    global_batch = _get(primus, "training.global_batch_size")
    derived = {"parallelism.data_parallel_shard_degree": shard,
               "training.global_batch_size": _get(primus, "training.local_batch_size") * replicate * shard
               if global_batch in (None, -1) else global_batch}
    for key in TORCHTITAN_CHECKED:
        want = derived.get(key, _get(primus, key))
        if want is None:
            continue
        yield key, want, _get(exported, key)
    if _get(primus, "training.mock_data"):
        yield "training.mock_data", "primus_hydra_mock", _get(exported, "training.dataset")


def _maxtext(primus: dict, exported: dict, gpus_per_node: int):
    for key in MAXTEXT_CHECKED:
        if primus.get(key) is not None:
            yield key, primus[key], exported.get(key)
    for key in MAXTEXT_FILLED_AXES:  # -1 ("the rest of the devices") must stay -1; a number must be what -1 gives
        want, got = primus.get(key), exported.get(key)
        if want is not None and want != -1 and got == -1:
            got = gpus_per_node // _maxtext_other_axes(exported, key)
        if want is not None:
            yield key, want, got


MAXTEXT_FILLED_AXES = ("ici_fsdp_parallelism", "ici_data_parallelism")
MAXTEXT_ICI_AXES = ("ici_data_parallelism", "ici_fsdp_parallelism", "ici_tensor_parallelism",
                    "ici_pipeline_parallelism", "ici_context_parallelism", "ici_expert_parallelism")


def _maxtext_other_axes(exported: dict, filled: str) -> int:
    product = 1
    for key in MAXTEXT_ICI_AXES:
        if key != filled and (exported.get(key) or 1) > 0:
            product *= exported.get(key) or 1
    return product


def _bridge(primus: dict, exported: dict, gpus_per_node: int):
    for key, path in BRIDGE_CHECKED.items():
        if primus.get(key) is not None:
            yield key, primus[key], _get(exported, path)
    lr = primus.get("finetune_lr", primus.get("lr"))
    if lr is not None:
        yield "lr", lr, _get(exported, "optimizer.lr")
    if primus.get("recipe") and primus.get("flavor"):
        yield "recipe", f"{primus['recipe']}.{primus['flavor']}", _get(exported, "recipe.name")

