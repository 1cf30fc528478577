"""A resolved Primus trainer module as this project's canonical keys.

The keys a framework takes as they are come from its backend's key table (backends/<name>/keys.py), read in reverse:
the native name back to the canonical key; the model goes through models.py. What no table holds is kept: keys the
experiment's own `overrides` set, and keys of the model preset, go to `backend.extra_args` verbatim (they reach the
backend unchanged); keys read only by Primus itself (its launcher, logging and extension switches) are listed in the
generated file's header with their values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from primus_hydra.backends.external import size_tag
from primus_hydra.backends.extra_args_owners import flatten
from primus_hydra.backends.key_table import Key, KeyTable
from primus_hydra.backends.maxtext.keys import MAXTEXT_KEYS
from primus_hydra.backends.megatron.keys import MEGATRON_KEYS
from primus_hydra.backends.torchtitan.keys import TORCHTITAN_KEYS
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.maxtext_models import maxtext_model
from primus_hydra.migrate.models import (
    MEGATRON_ARCHITECTURE,
    TRAINING_CHOICES,
    ModelChoice,
    megatron_model,
    stem,
    zoo_models,
)
from primus_hydra.migrate.pipeline_split import SPLIT_KEYS, VIRTUAL_STAGES, canonical_split
from primus_hydra.migrate.primus_yaml import EnvString, EnvValue, TrainerModule, dotted_get, plain, read_yaml, shown
from primus_hydra.migrate.sft_data import is_sft_with_dataset, map_sft_data
from primus_hydra.migrate.torchtitan_flavors import torchtitan_flavor_model

FRAMEWORKS = {"megatron": "megatron", "torchtitan": "torchtitan", "maxtext": "maxtext",
              "megatron_bridge": "megatron_bridge"}
GPUS_PER_NODE = 8  # Primus's GPUS_PER_NODE default: the layout its experiments are written for
# read by Primus's own runtime only (logging sinks, its launcher): listed in the header, not imported
PRIMUS_ONLY = {"trainable", "sink_level", "file_sink_level", "stderr_sink_level", "model", "framework", "config",
               "stage", "trainer_class"}
# Primus's own extensions of Megatron (its module presets primus_*.yaml, zero_bubble, torch_compile, module_base)
PRIMUS_EXTENSION_PRESETS = ("module_base.yaml", "primus_megatron_module.yaml", "primus_turbo.yaml",
                            "primus_pipeline.yaml", "zero_bubble.yaml", "torch_compile.yaml")
# Primus's generic model defaults (every Megatron model preset extends them): like its module presets, what a
# model preset keeps of them is not passed through; what it sets differently is
GENERIC_MODEL_PRESETS = ("language_model.yaml",)


def _same(value: Any) -> Any:
    return value


def _precision(params: dict) -> Optional[str]:
    if plain(params.get("fp16")):
        return None  # no canonical fp16: kept as an extra argument
    return "bf16" if plain(params.get("bf16")) else "fp32"


@dataclass
class Imported:
    backend: str
    model: ModelChoice
    canonical: dict = field(default_factory=dict)  # dotted canonical key -> value (EnvValue kept)
    extra_args: dict = field(default_factory=dict)  # native key (torchtitan: section.key) -> value
    primus_only: dict = field(default_factory=dict)  # key -> value, for the header
    warnings: list[str] = field(default_factory=list)
    consumed: set = field(default_factory=set)  # Primus key paths a canonical key took
    gpus_per_node: int = GPUS_PER_NODE  # the experiment's env GPUS_PER_NODE, else Primus's default
    logger: Optional[str] = None  # the logger= option its tracker keys choose (None: the default, tensorboard)

    def take(self, params: dict, path: str, canonical: str, convert: Callable = _same) -> None:
        value = _get(params, path)
        if value is _MISSING:
            return
        self.consumed.add(path)
        try:
            converted = convert(plain(value))
        except (TypeError, ValueError):
            raise PrimusError(f"{path}={shown(value)!r}: not a number ({canonical} takes one)") from None
        if converted is _SKIP:
            return
        # an environment read stays one: ${oc.env:VAR,default} (where the value is used as it is)
        if isinstance(value, (EnvValue, EnvString)) and converted == plain(value):
            converted = value
        self.canonical[canonical] = converted

    def take_keys(self, params: dict, table: KeyTable) -> None:
        """Every key of a backend's table, from its native name back to the canonical key."""
        for key in table:
            self.take(params, key.native, key.canonical, _conversion(key))


def _conversion(key: Key) -> Callable:
    convert = key.kind or _same
    return convert if key.imports_null else lambda value: _SKIP if value is None else convert(value)


_MISSING, _SKIP = object(), object()



def _get(tree: dict, path: str) -> Any:
    return dotted_get(tree, path, _MISSING)


def number(params: dict, path: str, default: Any, kind: Callable = int) -> Any:
    """params[path] (a dotted path, or a flat key of the canonical dict) as an int (or float); `default` where it is
    missing or null; PrimusError if not a number."""
    value = plain(params[path] if path in params else _get(params, path))
    if value is _MISSING or value is None:
        return default
    try:
        if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise PrimusError(f"{path}={value!r}: not {'an integer' if kind is int else 'a number'}") from None


def _skip_none(value: Any) -> Any:
    return _SKIP if value is None else value


# -- megatron (flat Megatron-LM argument names: backends/megatron/keys.py) -------------------------------------
LR_DECAY_STYLES = ("cosine", "linear", "constant")
MEGATRON_EVAL_ITERS = 100  # Megatron-LM's --eval-iters default, for an experiment that sets only eval_interval


def _megatron_evaluation(params: dict, imported: Imported) -> None:
    """eval_interval / eval_iters / split: Megatron's eval_iters=0 is no evaluation (module.eval_interval stays null)."""
    imported.take(params, "split", "module.data.split", _skip_none)
    iters, interval = plain(params.get("eval_iters")), plain(params.get("eval_interval"))
    imported.consumed.update(key for key in ("eval_iters", "eval_interval") if key in params)
    if interval and iters != 0:
        imported.canonical["module.eval_interval"] = interval
        imported.canonical["module.eval_iters"] = iters or MEGATRON_EVAL_ITERS
_NO_DATA_PATH = ("mock_data=false without a data path (Primus's trainer reads a dataset it names itself, e.g. "
                 "sft_dataset_name): imported with module.data.source=mock; set module.data.* to your data")


def map_megatron(module: TrainerModule, imported: Imported) -> None:
    params = module.params
    imported.take_keys(params, MEGATRON_KEYS)
    style = plain(params.get("lr_decay_style", "cosine"))
    imported.consumed.add("lr_decay_style")
    if style in LR_DECAY_STYLES:
        imported.canonical["module.lr_decay_style"] = style
    else:
        raise PrimusError(f"lr_decay_style={style}: this project's schedules are {', '.join(LR_DECAY_STYLES)}")
    precision = _precision(params)
    imported.consumed.update({"bf16"} | ({"fp16"} if precision else set()))
    if precision:
        imported.canonical["module.precision"] = precision
    vpp = plain(params.get("virtual_pipeline_model_parallel_size"))
    if vpp and "backend.virtual_stages_per_pipeline_rank" not in imported.canonical:
        imported.canonical["backend.virtual_stages_per_pipeline_rank"] = vpp
    imported.consumed.add("virtual_pipeline_model_parallel_size")
    _megatron_evaluation(params, imported)
    _megatron_data(params, imported)
    _megatron_checkpoints(params, imported)
    recompute = plain(params.get("recompute_granularity"))
    imported.consumed.add("recompute_granularity")
    if recompute:
        imported.canonical["backend.recompute_granularity"] = recompute
    imported.take(params, "recompute_method", "backend.recompute_method", _skip_none)
    imported.take(params, "recompute_num_layers", "backend.recompute_num_layers", _skip_none)
    impl = plain(params.get("transformer_impl"))
    imported.consumed.add("transformer_impl")
    if impl in ("transformer_engine", "local"):
        imported.canonical["backend.transformer_impl"] = impl
    if plain(params.get("use_torch_fsdp2")):  # what the translation sets with FSDP2 (Megatron refuses the others)
        imported.consumed.update({"gradient_accumulation_fusion", "use_distributed_optimizer"})
        imported.canonical.pop("backend.use_distributed_optimizer", None)
    imported.canonical.update(fewest_nodes(imported.canonical, imported.gpus_per_node))
    _megatron_pipeline_split(params, imported)


def _megatron_pipeline_split(params: dict, imported: Imported) -> None:
    """Megatron's split of the layers over the pipeline stages (migrate/pipeline_split.py): fixed first/last stages,
    a layout, or the even rule, as backend.decoder_first/last_pipeline_num_layers, virtual stages or
    backend.pipeline_layout."""
    resolved = {key: plain(params[key]) for key in SPLIT_KEYS if key in params}
    resolved.update(pipeline_model_parallel_size=number(params, "pipeline_model_parallel_size", 1),
                    num_layers=number(params, "num_layers", None), mtp_num_layers=number(params, "mtp_num_layers", 0),
                    virtual_pipeline_model_parallel_size=number(params, "virtual_pipeline_model_parallel_size", None))
    split = canonical_split(resolved)
    imported.consumed.update(key for key in SPLIT_KEYS if key in params)
    if any(key.startswith("backend.decoder_") for key in split) \
            and imported.canonical.get(VIRTUAL_STAGES) == 1:  # one virtual stage per rank is no interleaving
        del imported.canonical[VIRTUAL_STAGES]
    imported.canonical.update(split)


def fewest_nodes(canonical: dict, gpus_per_node: int) -> dict:
    """launch.nnodes: the fewest nodes of gpus_per_node GPUs on which the layout is whole (Primus reads NNODES)."""
    def size(key: str) -> int:
        return number(canonical, f"module.parallel.{key}", 1) or 1

    tp, pp, cp, ep = size("tp"), size("pp"), size("cp"), size("ep")
    micro = number(canonical, "module.micro_batch_size", None)
    batch = number(canonical, "module.global_batch_size", None)
    for nodes in range(1, 65):
        world = gpus_per_node * nodes
        if world % (tp * pp * cp) or (world // pp) % ep:
            continue
        dp = world // (tp * pp * cp)
        if micro and batch and batch % (micro * dp):
            continue
        return {"launch.nnodes": nodes} if nodes > 1 else {}
    return {}


def _megatron_data(params: dict, imported: Imported) -> None:
    imported.consumed.update({"mock_data", "train_data_path", "data_path"})
    if is_sft_with_dataset(params):  # Primus's SFT trainer reads its dataset whatever mock_data says
        map_sft_data(params, imported)
        return
    if plain(params.get("mock_data")):
        imported.canonical["module.data.source"] = "mock"
        return
    path = params.get("data_path") or params.get("train_data_path")
    if not plain(path):
        imported.canonical["module.data.source"] = "mock"
        imported.warnings.append(_NO_DATA_PATH)
        return
    imported.canonical["module.data.source"] = "indexed"
    text = path.value if isinstance(path, EnvValue) else path
    blend = " ".join(str(part) for part in text) if isinstance(text, list) else str(text).strip()
    imported.canonical["module.data.path"] = EnvValue(blend, path.var, path.default) \
        if isinstance(path, EnvValue) and blend == str(path.value) else blend


def _megatron_checkpoints(params: dict, imported: Imported) -> None:
    imported.consumed.update({"save", "save_interval", "load", "finetune", "disable_last_saving"})
    save, interval = plain(params.get("save")), plain(params.get("save_interval"))
    if save:
        imported.canonical["module.checkpoint.dir"] = save
        imported.canonical["module.checkpoint.interval"] = interval or 0
        imported.canonical["module.checkpoint.save_final"] = not plain(params.get("disable_last_saving"))
    else:  # Primus's Megatron saves nothing without `save`
        imported.canonical["module.checkpoint.interval"] = 0
        imported.canonical["module.checkpoint.save_final"] = False
    load = plain(params.get("load"))
    if load:
        key = "module.checkpoint.load" if plain(params.get("finetune")) else "module.checkpoint.resume"
        imported.canonical[key] = load


# -- torchtitan (its JobConfig sections) -----------------------------------------------------------------------
def map_torchtitan(module: TrainerModule, imported: Imported) -> None:
    params = module.params
    imported.take_keys(params, TORCHTITAN_KEYS)
    lr = number(params, "optimizer.lr", 8e-4, float)
    factor = number(params, "lr_scheduler.min_lr_factor", None, float)
    imported.consumed.add("lr_scheduler.min_lr_factor")
    if factor is not None:
        imported.canonical["module.min_lr"] = lr * factor
    decay = plain(_get(params, "lr_scheduler.decay_type")) or "linear"
    imported.consumed.add("lr_scheduler.decay_type")
    if decay not in ("cosine", "linear"):
        raise PrimusError(f"lr_scheduler.decay_type={decay}: this project's schedules are cosine and linear")
    imported.canonical["module.lr_decay_style"] = decay
    mixed = plain(_get(params, "training.mixed_precision_param"))
    imported.consumed.add("training.mixed_precision_param")
    imported.canonical["module.precision"] = "bf16" if mixed == "bfloat16" else "fp32"
    _torchtitan_layout(params, imported)
    imported.consumed.update({"training.mock_data", "training.dataset", "training.dataset_path"})
    if plain(_get(params, "training.mock_data")):
        imported.canonical["module.data.source"] = "mock"
    else:
        dataset = plain(_get(params, "training.dataset"))
        imported.canonical["module.data.source"] = "text"
        path = plain(_get(params, "training.dataset_path"))
        if path:
            imported.canonical["module.data.path"] = path
        imported.warnings.append(f"training.dataset={dataset}: this project feeds torchtitan its own data sources, "
                                 f"not torchtitan's Hugging Face datasets; imported as module.data.source=text "
                                 f"({'its dataset_path' if path else 'set module.data.path to your corpus'})")
    if plain(_get(params, "checkpoint.enable")):
        imported.take(params, "checkpoint.interval", "module.checkpoint.interval")
        imported.take(params, "checkpoint.folder", "module.checkpoint.dir")
    else:
        imported.canonical["module.checkpoint.interval"] = 0
        imported.canonical["module.checkpoint.save_final"] = False
    imported.consumed.update({"checkpoint.enable", "checkpoint.interval", "checkpoint.folder"})


def _torchtitan_layout(params: dict, imported: Imported) -> None:
    """Degrees of -1 (torchtitan: the rest of the world) and global_batch_size -1 (local x data parallel)."""
    shard = number(params, "parallelism.data_parallel_shard_degree", None)
    replicate = number(params, "parallelism.data_parallel_replicate_degree", 1) or 1
    imported.consumed.update({"parallelism.data_parallel_shard_degree", "parallelism.data_parallel_replicate_degree",
                              "training.global_batch_size"})
    if shard not in (None, 1) and replicate > 1:
        raise PrimusError(f"parallelism.data_parallel_replicate_degree={replicate} with data_parallel_shard_degree="
                          f"{shard}: HSDP has no canonical equivalent (module.parallel.fsdp shards over all of dp)")
    imported.canonical["module.parallel.fsdp"] = shard not in (None, 1)
    world = imported.gpus_per_node
    model_parallel = 1
    for key in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree"):
        model_parallel *= number(params, f"parallelism.{key}", 1) or 1
    dp = world // model_parallel
    if shard not in (None, -1, 1) and shard != dp or replicate not in (1, dp):
        explicit = shard if shard not in (None, -1, 1) else replicate
        imported.canonical["module.parallel.dp"] = explicit
        dp = explicit
    local = number(params, "training.local_batch_size", 8) or 8
    global_batch = plain(_get(params, "training.global_batch_size"))
    imported.canonical["module.global_batch_size"] = local * dp if global_batch in (None, -1) else global_batch


def torchtitan_model(module: TrainerModule, imported: Imported) -> ModelChoice:
    """The zoo preset that is torchtitan's model.name/model.flavor; else a model generated from the installed
    torchtitan's own numbers of that flavor, which the experiment names (backend.flavor)."""
    name = plain(_get(module.params, "model.name"))
    flavor = plain(_get(module.params, "model.flavor"))
    imported.consumed.update({"model.name", "model.flavor"})
    candidates = [zoo for zoo in zoo_models() if _torchtitan_names(zoo) == (name, flavor)]
    if not candidates:
        imported.canonical["backend.flavor"] = flavor
        return torchtitan_flavor_model(str(name), str(flavor), str(plain(module.model)))
    best = sorted(candidates, key=lambda zoo: (-_common_prefix(stem(zoo), stem(module.model)), zoo))[0]
    return ModelChoice(best)


def _common_prefix(a: str, b: str) -> int:
    a, b = a.replace("_", ""), b.replace("_", "")
    size = 0
    while size < min(len(a), len(b)) and a[size] == b[size]:
        size += 1
    return size


def _torchtitan_names(zoo: str) -> tuple[str, str]:
    from primus_hydra.backends.torchtitan.args import KNOWN_FLAVORS, TORCHTITAN_MODEL_NAMES

    model = zoo_models()[zoo]
    return (TORCHTITAN_MODEL_NAMES.get(model.family, model.family),
            KNOWN_FLAVORS.get(zoo) or size_tag(zoo) or zoo)


# -- maxtext (flat MaxText names: backends/maxtext/keys.py; its models: maxtext_models.py) --------------------
def map_maxtext(module: TrainerModule, imported: Imported) -> None:
    params = module.params
    imported.take_keys(params, MAXTEXT_KEYS)
    imported.consumed.update({"dtype", "dataset_type", "per_device_batch_size", "enable_checkpointing"})
    imported.canonical["module.precision"] = "bf16" if plain(params.get("dtype")) == "bfloat16" else "fp32"
    imported.canonical["module.data.source"] = "mock" if plain(params.get("dataset_type")) == "synthetic" else "text"
    if not plain(params.get("enable_checkpointing")):
        imported.canonical["module.checkpoint.interval"] = 0
        imported.canonical["module.checkpoint.save_final"] = False
    per_device = number(params, "per_device_batch_size", 1, float) or 1
    accumulation = number(params, "gradient_accumulation_steps", 1) or 1
    imported.consumed.add("gradient_accumulation_steps")
    tp = number(params, "ici_tensor_parallelism", 1) or 1
    pp = number(params, "ici_pipeline_parallelism", 1) or 1
    imported.canonical["module.parallel.tp"], imported.canonical["module.parallel.pp"] = tp, pp
    fsdp = number(params, "ici_fsdp_parallelism", 1) or 1
    imported.canonical["module.parallel.fsdp"] = fsdp not in (1,)
    ep = plain(params.get("ici_expert_parallelism"))
    gpus = imported.gpus_per_node
    imported.canonical["module.parallel.ep"] = gpus // (tp * pp) if ep == -1 else number(params, "ici_expert_parallelism", 1) or 1
    imported.consumed.update({"ici_tensor_parallelism", "ici_pipeline_parallelism", "ici_fsdp_parallelism",
                              "ici_expert_parallelism", "ici_data_parallelism", "dcn_data_parallelism"})
    # MaxText's batch is per device, model-parallel devices included
    micro = per_device * gpus / (gpus // (tp * pp))
    imported.canonical["module.micro_batch_size"] = int(micro) if float(micro).is_integer() else micro
    imported.canonical["module.global_batch_size"] = int(per_device * gpus * accumulation)
    imported.canonical["module.lr_decay_style"] = "cosine"
    scan = plain(params.get("scan_layers"))
    imported.consumed.add("scan_layers")
    if scan is not None and bool(scan) != (pp == 1):  # the translation scans layers without pipelining only
        imported.warnings.append(f"scan_layers={scan} with ici_pipeline_parallelism={pp}: this project's MaxText "
                                 f"translation sets scan_layers={pp == 1} (it scans pipeline iterations instead)")


# -- megatron_bridge (flat Megatron names, a recipe for the model) ---------------------------------------------
def map_megatron_bridge(module: TrainerModule, imported: Imported) -> None:
    params = module.params
    megatrons_own = ("backend.", "model.")  # backend=megatron's switches; Bridge's recipe decides the model
    imported.take_keys(params, KeyTable(key for key in MEGATRON_KEYS if not key.canonical.startswith(megatrons_own)))
    lr = params.get("finetune_lr", params.get("lr"))
    if lr is not None:
        imported.canonical["module.lr"] = number(params, "finetune_lr" if "finetune_lr" in params else "lr", None, float)
    imported.consumed.update({"finetune_lr", "mock", "recipe", "flavor", "skip_save"})
    imported.canonical["module.data.source"] = "mock"
    if not plain(params.get("mock")):
        path = plain(params.get("data_paths") or params.get("train_data_path"))
        if path:
            imported.canonical["module.data.source"] = "indexed"
            imported.canonical["module.data.path"] = " ".join(map(str, path)) if isinstance(path, list) else str(path)
        else:
            imported.warnings.append(_NO_DATA_PATH)
    if plain(params.get("skip_save")):
        imported.canonical["module.checkpoint.interval"] = 0
        imported.canonical["module.checkpoint.save_final"] = False
    recipe, flavor = plain(params.get("recipe")), plain(params.get("flavor"))
    if recipe and flavor:
        imported.canonical["backend.recipe"] = f"{recipe}.{flavor}"
    imported.take(params, "hf_path", "backend.hf_model_id")
    imported.take(params, "peft", "module.peft.method", lambda v: _SKIP if v in (None, "none") else v)
    if str(plain(params.get("stage", "pretrain"))) == "sft":
        imported.canonical["module.stage"] = "sft"


def _bare(name: Any) -> str:
    return stem(name).replace("_", "").replace(".", "")


def bridge_model(module: TrainerModule, imported: Imported, primus_root, environ: dict) -> ModelChoice:
    """The zoo preset of the recipe's model (its flavor without _pretrain_config/_finetune_config: Bridge's
    mamba2_130m_pretrain_config builds mamba2_130m) or of the model preset's name; else the numbers of Primus's
    Megatron preset of that name (a Bridge model preset is a recipe pointer without numbers; the recipe decides the
    model it trains)."""
    from pathlib import Path

    flavor = re.sub(r"_(pretrain|finetune)_config$", "", str(plain(module.params.get("flavor")) or ""))
    wanted = _bare(module.model)
    for name in (flavor, wanted) if flavor else (wanted,):
        for zoo in zoo_models():
            if _bare(zoo) == _bare(name):
                return ModelChoice(zoo)
    folder = Path(primus_root) / "primus" / "configs" / "models" / "megatron"
    twins = [path for path in folder.glob("*.yaml") if _bare(path.name) == wanted]
    if not twins:
        raise PrimusError(f"model {plain(module.model)}: a Megatron-Bridge recipe pointer without architecture "
                          f"numbers; no zoo preset and no Primus Megatron preset has its name")
    numbers = plain(read_yaml(twins[0], environ))
    choice = megatron_model(numbers, numbers, twins[0].stem)
    if choice.unrepresentable:
        raise PrimusError(f"model {plain(module.model)}: its Primus Megatron preset {twins[0].name} is an "
                          f"architecture this project's models cannot hold ({', '.join(choice.unrepresentable)})")
    imported.warnings.append(f"model {plain(module.model)} is a Bridge recipe pointer: the model's numbers come from "
                             f"Primus's Megatron preset {twins[0].name} (the recipe decides the model Bridge trains)")
    seq = plain(imported.canonical.get("module.seq_length"))
    if seq and seq > zoo_models()[choice.zoo].max_position_embeddings:  # the recipe's length, not the preset's
        choice.experiment["max_position_embeddings"] = seq
    return choice


MAPPERS = {"megatron": map_megatron, "torchtitan": map_torchtitan, "maxtext": map_maxtext,
           "megatron_bridge": map_megatron_bridge}


def import_module(module: TrainerModule, primus_root, environ: dict, gpus_per_node: int = GPUS_PER_NODE) -> Imported:
    backend = FRAMEWORKS[module.framework]
    if backend == "megatron":
        choice = megatron_model(plain(module.preset_params), plain(module.params), str(plain(module.model)))
        if choice.unrepresentable:
            raise PrimusError(f"model {plain(module.model)}: an architecture this project's models cannot hold "
                              f"({', '.join(choice.unrepresentable)})")
    else:
        choice = None
    imported = Imported(backend, choice, gpus_per_node=gpus_per_node)
    MAPPERS[backend](module, imported)
    if backend == "megatron_bridge":
        imported.model = bridge_model(module, imported, primus_root, environ)
    elif choice is None:
        imported.model = {"torchtitan": torchtitan_model, "maxtext": maxtext_model}[backend](module, imported)
    map_tracking(module.params, imported)
    _pass_through(module, imported, primus_root, environ)
    return imported


# Primus's experiment-tracker keys -> logger.* (the on/off switches choose the logger= option)
WANDB_KEYS = {"wandb_project": "logger.wandb.project", "wandb_exp_name": "logger.wandb.name",
              "wandb_save_dir": "logger.wandb.dir", "wandb_entity": "logger.wandb.entity"}
MLFLOW_KEYS = {"mlflow_run_name": "logger.mlflow.run_name", "mlflow_experiment_name": "logger.mlflow.experiment_name"}
TRACKER_SWITCHES = ("disable_wandb", "disable_mlflow", "disable_tensorboard")


def map_tracking(params: dict, imported: Imported) -> None:
    """disable_wandb / disable_mlflow / disable_tensorboard and the wandb_* / mlflow_* keys as the logger= option
    (tensorboard, wandb, mlflow, or many with logger.use) and its keys; W&B is on when disable_wandb is false, or
    unset with a wandb_project. Credentials stay in the environment (WANDB_API_KEY, MLFLOW_TRACKING_URI/TOKEN)."""
    def value(path: str) -> Any:
        found = _get(params, path)
        return None if found is _MISSING else plain(found)

    switches = {path: value(path) for path in TRACKER_SWITCHES}
    use = [] if switches["disable_tensorboard"] is True else ["tensorboard"]
    if switches["disable_wandb"] is False or (switches["disable_wandb"] is None and value("wandb_project")):
        use.append("wandb")
        imported.canonical.update({key: value(path) for path, key in WANDB_KEYS.items() if value(path)})
    if switches["disable_mlflow"] is False:
        use.append("mlflow")
        imported.canonical.update({key: value(path) for path, key in MLFLOW_KEYS.items() if value(path)})
    imported.consumed.update(path for path in (*TRACKER_SWITCHES, *WANDB_KEYS, *MLFLOW_KEYS)
                             if _get(params, path) is not _MISSING)
    trackers = [sink for sink in use if sink != "tensorboard"]
    if trackers:
        imported.logger = trackers[0] if use == trackers and len(trackers) == 1 else "many"
        if imported.logger == "many":
            imported.canonical["logger.use"] = use


def _pass_through(module: TrainerModule, imported: Imported, primus_root, environ: dict) -> None:
    """What no table took reaches the backend verbatim, with the value Primus's trainer receives (module.params, so a
    module-preset value that shadows the model preset's, and a preset's mapping with an override merged in, arrive
    as Primus passes them): the keys the experiment's overrides set, the keys written beside the module's
    framework/config/model, and what the model preset sets beyond Primus's generic model defaults. A null is passed
    as null, as Primus passes it, except to torchtitan, whose TOML job file has no null (its default applies).
    Keys only Primus reads go to the header."""
    nested = imported.backend == "torchtitan"
    extension = _preset_keys(primus_root, module.framework, environ, PRIMUS_EXTENSION_PRESETS)
    architecture = set(MEGATRON_ARCHITECTURE) | set(TRAINING_CHOICES) | {"group_query_attention"} \
        if imported.backend == "megatron" else set()
    candidates = [*(flatten(module.overrides) if nested else module.overrides),
                  *(flatten(module.module_keys) if nested else module.module_keys)]
    if imported.backend == "megatron":
        generic = _preset_keys(primus_root, "megatron", environ, GENERIC_MODEL_PRESETS, kind="models")
        candidates += [key for key, value in module.model_preset.items()
                       if key not in generic or plain(generic[key]) != plain(value)]
    for path in dict.fromkeys(candidates):
        if path in imported.consumed or path in architecture or path in imported.extra_args:
            continue
        value = _get(module.params, path)
        if path.split(".")[0] in PRIMUS_ONLY or path in extension:
            imported.primus_only[path] = module.module_keys.get(path) if value is _MISSING else value
        elif value is _MISSING or value == {} or (nested and plain(value) is None):
            continue  # not a key the trainer reads (a private `_` key), or nothing to pass
        else:
            imported.extra_args[path] = value


_PRESET_CACHE: dict = {}


def _preset_keys(primus_root, framework: str, environ: dict, names: tuple, kind: str = "modules") -> dict:
    """The keys (and values) of these Primus presets, with what they extend."""
    from pathlib import Path

    key = (str(primus_root), framework, names, kind)
    if key not in _PRESET_CACHE:
        found: dict = {}
        folder = Path(primus_root) / "primus" / "configs" / kind
        for name in names:
            for path in (folder / name, folder / framework / name):
                if path.is_file():
                    found.update(read_yaml(path, environ))
        _PRESET_CACHE[key] = found
    return _PRESET_CACHE[key]
