"""Primus's experiment semantics, reproduced rule by rule (its loader: primus/core/config/yaml_loader.py, merge_utils,
primus/core/launcher/parser.py's PrimusParser, yaml_utils and primus_config's runtime shape; read, not copied).

- Files load with the safe loader (source_files.py bounds them). `${VAR:default}` / `${VAR}` is replaced in every
  string value (not in keys) before the file's `extends:` merge; a string that changed is typed by Primus's rules:
  `true`/`false` in any case -> bool, `-?\\d+` -> int, a decimal or exponent float -> float, anything else stays text
  (`null`, `+5`, `1_000`, `nan`, `~` and `""` too). `${VAR}` with VAR unset is an error.
- `extends:` (one file name or a list, after substitution, relative to the file): the files deep-merged in order,
  then the file's own keys; dicts merge key by key, anything else (lists too) is replaced.
- A trainer module: its module preset, whose `name` and `framework` Primus overwrites; the keys written beside
  `framework`/`config`/`model` in the experiment's module (e.g. `trainer_class`), where the preset lacks them; the
  model preset's top-level keys where the module has none (a shadowed key is dropped, not merged); then the
  module's `overrides` deep-merged on top (they may add keys).
- Each of those two merges reassigns every value into the module's namespace, and a value that is the text
  `null` becomes None where the namespace already held that mapping (yaml_utils.set_value_by_key): the module's
  own values at the first merge, every mapping at the second.
- The trainer reads `params`: the module's keys but `name`, `framework`, `config`, `model`, `params`,
  `trainer_class` and private `_` keys, with `model` set to the module's model (primus_config's runtime shape).

A value built from the environment is kept as an EnvValue (the whole string was one `${...}`) or an EnvString
(`${...}` inside a longer string), whether or not the variable was set, so that the imported experiment reads the
variable (`${oc.env:VAR,default}`) instead of holding its value.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from primus_hydra.errors import PrimusError
from primus_hydra.migrate.source_files import load_source

ENV_REFERENCE = re.compile(r"\$\{([^:{}]+)(?::([^}]*))?\}")
FLOAT = re.compile(r"^-?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)$")
META_KEYS = ("work_group", "user_name", "exp_name", "workspace")
# files of Primus's examples/ that are no LLM experiment this project could run: what each is, by its framework ...
NOT_LLM_FRAMEWORKS = {
    "diffusion": "a diffusion model's experiment (Primus's diffusion trainer: Flux, Wan), not an LLM",
    "maxdiffusion": "a MaxDiffusion experiment (diffusion models: Flux, Wan), not an LLM",
    "hummingbirdxt": "a HummingbirdXT experiment (video diffusion: Wan), not an LLM",
    "nemo_automodel": "a NeMo AutoModel experiment (a framework this project does not run)",
}
# ... or by the folder of its model preset (Primus's Megatron trainer runs Flux from models/megatron/diffusion/) ...
NOT_LLM_MODEL_FOLDERS = {
    "diffusion": "a diffusion (Flux) experiment (Primus's Megatron diffusion trainer), not an LLM",
}
# ... or by the top-level key of a file that is no experiment at all
NOT_EXPERIMENT_KEYS = {
    "hardware_config": "a hardware description for Primus's performance projection",
    "target_cluster": "a tuning agent's cluster description",
    "matchers": "a Transformer Engine precision recipe (configs and matchers)",
}


class SetApart(PrimusError):
    """A file that is no LLM experiment (another kind of experiment, a hardware file, a template): one line saying
    what it is; a folder's import counts it apart from the experiments that failed."""
EXPERIMENT_KEYS = set(META_KEYS) | {"modules", "platform", "env"}
RESERVED_MODULE_KEYS = ("name", "framework", "config", "model", "overrides", "params")  # not copied from the module
RUNTIME_RESERVED_KEYS = ("name", "framework", "config", "model", "params", "trainer_class")  # not in params
PLATFORM_KEYS = ("name", "num_nodes_env_key", "node_rank_env_key", "master_addr_env_key", "master_port_env_key",
                 "gpus_per_node_env_key", "master_sink_level", "workspace")
MAX_EXTENDS_DEPTH = 32


@dataclass(frozen=True)
class EnvValue:
    """A value Primus took from one `${VAR:default}` (the whole string): what it resolved to now, what it would be
    with VAR unset (`unset_value`; None for `${VAR}`, which then fails), and whether VAR was set."""
    value: Any
    var: str
    default: Optional[str]
    unset_value: Any = None
    from_environment: bool = False


class EnvString(str):
    """A string Primus built with `${VAR:default}` inside it (e.g. `${PRIMUS_MODEL:llama3_8B}.yaml`): `template`
    is the source text, `from_environment` whether a variable it reads was set."""

    template: str = ""
    from_environment: bool = False


@dataclass
class TrainerModule:
    name: str  # pre_trainer | post_trainer | sft_trainer ...
    framework: str
    config: str
    model: Any  # the model preset file name (an EnvValue or EnvString when env-driven)
    params: dict  # what Primus's trainer reads: presets, module keys and overrides, as Primus resolves them
    preset_params: dict  # the same before the overrides
    overrides: dict  # the experiment's own `overrides` (what its author set)
    model_preset: dict  # the model preset alone
    module_keys: dict = field(default_factory=dict)  # keys written beside framework/config/model (trainer_class ...)


@dataclass
class PrimusExperiment:
    path: Path
    meta: dict
    modules: list[TrainerModule]
    env: dict
    warnings: list[str]


def _map_env_values(value: Any, of_env_value: Any) -> Any:
    """The tree with each EnvValue / EnvString replaced by of_env_value(it)."""
    if isinstance(value, (EnvValue, EnvString)):
        return of_env_value(value)
    if isinstance(value, dict):
        return {key: _map_env_values(item, of_env_value) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_env_values(item, of_env_value) for item in value]
    return value


def plain(value: Any) -> Any:
    """The resolved value, EnvValue wrappers removed (recursively)."""
    return _map_env_values(value, lambda env: env.value if isinstance(env, EnvValue) else str(env))


def shown(value: Any) -> Any:
    """The value as a message or a comment may show it: an environment read as its `${VAR:default}` source text,
    never what the environment held."""
    return _map_env_values(value, lambda env: env.template if isinstance(env, EnvString) else
                           "${" + env.var + ("" if env.default is None else ":" + env.default) + "}")


def from_environment(value: Any) -> bool:
    """Whether any part of the value came from a variable that was set."""
    if isinstance(value, (EnvValue, EnvString)):
        return value.from_environment
    if isinstance(value, dict):
        return any(from_environment(item) for item in value.values())
    if isinstance(value, list):
        return any(from_environment(item) for item in value)
    return False


def dotted_get(tree: Any, path: str, default: Any = None) -> Any:
    """tree["a"]["b"] for path "a.b"; `default` where a part is missing."""
    node = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def primus_scalar(text: str) -> Any:
    """A substituted string typed as Primus types it (yaml_loader._try_scalar)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if FLOAT.fullmatch(text):
        try:
            return float(text)
        except ValueError:
            return text
    return text


def substitute(text: str, environ: dict, where: str) -> Any:
    def replace_reference(match: re.Match, unset: bool = False) -> str:
        var, default = match.group(1), match.group(2)
        if default is None:
            if var not in environ:
                raise PrimusError(f"{where}: ${{{var}}} needs the environment variable {var}, which is not set "
                                  f"(Primus requires it too); set it or give a default: ${{{var}:value}}")
            return "" if unset else environ[var]
        return default if unset else environ.get(var, default)

    replaced = ENV_REFERENCE.sub(replace_reference, text)
    if replaced == text:
        return text
    value = primus_scalar(replaced)
    used = [match.group(1) for match in ENV_REFERENCE.finditer(text)]
    set_now = any(var in environ for var in used)
    whole = ENV_REFERENCE.fullmatch(text)
    if whole:
        unset = primus_scalar(whole.group(2)) if whole.group(2) is not None else None
        return EnvValue(value, whole.group(1), whole.group(2), unset, set_now)
    if isinstance(value, str):
        value = EnvString(value)
    else:  # Primus typed the joined text: still an env read, kept as its template
        value = EnvString(replaced)
    value.template, value.from_environment = text, set_now
    return value


def _resolve_env(tree: Any, environ: dict, where: str) -> Any:
    if isinstance(tree, dict):
        return {key: _resolve_env(value, environ, where) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_resolve_env(value, environ, where) for value in tree]
    if isinstance(tree, str):
        return substitute(tree, environ, where)
    return tree


_SCALARS = (str, int, float, bool, type(None))  # EnvString is a str: its attributes are set once, when it is made


def tree_copy(tree: Any) -> Any:
    """A copy of nested dicts and lists whose leaves that never change (text, numbers, an env read of them) are
    shared: what a deep copy gives for what the merges and assignments here do with it, at a fraction of its cost
    (a deep copy rebuilds each frozen EnvValue; ~5 copies of a ~400-key module preset a file). Any other leaf is
    deep-copied."""
    kind = type(tree)
    if kind is dict:
        return {key: tree_copy(value) for key, value in tree.items()}
    if kind is list:
        return [tree_copy(value) for value in tree]
    if isinstance(tree, _SCALARS) or (kind is EnvValue and isinstance(tree.value, _SCALARS)
                                      and isinstance(tree.unset_value, _SCALARS)):
        return tree
    return copy.deepcopy(tree)


def deep_merge(base: dict, override: dict) -> dict:
    """merge_utils.deep_merge: nested dicts merge, anything else is replaced; neither input changes."""
    merged = tree_copy(base)
    for key, value in override.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _null_text_as_none(value: Any) -> Any:
    if isinstance(value, EnvValue):
        unset = None if value.unset_value == "null" else value.unset_value
        return replace(value, value=None if value.value == "null" else value.value, unset_value=unset)
    return None if value == "null" else value


def _assign(namespace: dict, merged: dict) -> None:
    """yaml_utils._assign_namespace_from_dict_inplace on dicts standing for namespaces: a mapping the namespace
    held already is assigned key by key; a leaf that is the text `null` becomes None; a new mapping is set whole."""
    for key, value in merged.items():
        if isinstance(value, dict):
            if isinstance(namespace.get(key), dict):
                _assign(namespace[key], value)
            else:
                namespace[key] = tree_copy(value)
        else:
            namespace[key] = _null_text_as_none(value)


def merge_into_namespace(namespace: dict, override: dict) -> None:
    """yaml_utils.deep_merge_namespace: the merge of the namespace with `override`, assigned back into it."""
    _assign(namespace, deep_merge(namespace, override))


class _Reading:
    """One experiment's reads: the cache of files, where Primus's checkout is, and the warnings on the way."""

    def __init__(self, environ: dict, primus_root: Optional[Path], cache: Optional[dict]):
        self.environ, self.cache = environ, cache if cache is not None else {}
        self.root = primus_root.resolve() if primus_root is not None else None
        self.warnings: list[str] = []

    def read(self, path: Path) -> dict:
        """One Primus YAML file: env references replaced, then its `extends:` merged under it."""
        tree, warnings = self._read(Path(path), ())
        self.warnings += [line for line in warnings if line not in self.warnings]
        return tree

    def _read(self, path: Path, chain: tuple) -> tuple[dict, list[str]]:
        resolved = path.resolve()
        if resolved in chain:
            cycle = " -> ".join(p.name for p in chain[chain.index(resolved):] + (resolved,))
            raise PrimusError(f"{path}: `extends` runs in a circle ({cycle}); Primus never finishes reading it")
        if len(chain) > MAX_EXTENDS_DEPTH:
            raise PrimusError(f"{path}: `extends` is more than {MAX_EXTENDS_DEPTH} files deep; not a Primus config")
        key = (resolved, tuple(sorted(self.environ.items())))
        if key not in self.cache:
            self.cache[key] = self._read_uncached(path, chain + (resolved,))
        return self.cache[key]

    def _read_uncached(self, path: Path, chain: tuple) -> tuple[dict, list[str]]:
        tree, warnings = load_source(path)
        if tree is None:
            raise PrimusError(f"{path}: empty (Primus refuses an empty config file)")
        if not isinstance(tree, dict):
            raise PrimusError(f"{path}: not a Primus config (a YAML mapping is expected, not {_kind(tree)})")
        tree = _resolve_env(tree, self.environ, str(path))
        if "extends" not in tree:
            return tree, warnings
        extends = plain(tree.pop("extends"))
        if isinstance(extends, str):
            extends = [extends]
        if not isinstance(extends, list) or not all(isinstance(name, str) and name for name in extends):
            raise PrimusError(f"{path}: extends={extends!r}: Primus takes a file name or a list of file names "
                              f"relative to the file")
        merged: dict = {}
        for name in extends:
            preset = path.parent / name
            if not preset.exists():
                raise PrimusError(f"{path}: extends {name}, which does not exist ({preset})")
            if self.root is not None and self.root not in preset.resolve().parents:
                warnings = warnings + [f"{path.name}: extends {name}, outside task.primus_root={self.root} "
                                       f"({preset.resolve()}); read as Primus would"]
            preset_tree, preset_warnings = self._read(preset, chain)
            merged = deep_merge(merged, preset_tree)
            warnings = warnings + [line for line in preset_warnings if line not in warnings]
        return deep_merge(merged, tree), warnings


def read_yaml(path: Path, environ: dict, cache: Optional[dict] = None) -> dict:
    """One Primus YAML file as Primus's parse_yaml reads it (PrimusError, one line naming the file, otherwise)."""
    return _Reading(environ, None, cache).read(path)


def load_experiment(path: Path, primus_root: Path, environ: dict, cache: Optional[dict] = None,
                    frameworks: Optional[dict] = None) -> PrimusExperiment:
    """The experiment as PrimusParser resolves it (PrimusError, one line naming the file, when it is not one);
    `frameworks`: the ones to accept (another is one line before its presets are looked for)."""
    reading = _Reading(environ, primus_root, cache)
    tree = reading.read(Path(path))
    if "modules" not in tree:
        what = next((what for key, what in NOT_EXPERIMENT_KEYS.items() if key in tree), None)
        raise SetApart(f"{path}: {what}, not an experiment" if what else
                       f"{path}: not a Primus experiment (it has no `modules:`)")
    placeholder = re.search(r"<YOUR_[A-Z_]+>", repr(plain(tree["modules"])))
    if placeholder:
        raise SetApart(f"{path}: a template, not an experiment (it still has the placeholder {placeholder.group(0)})")
    missing = [key for key in META_KEYS if key not in tree]
    if missing:
        raise PrimusError(f"{path}: not a Primus experiment (Primus requires {', '.join(missing)} at the top level)")
    _check_platform(path, tree.get("platform", _ABSENT), primus_root, reading)
    modules_tree = tree["modules"]
    if not isinstance(modules_tree, dict):
        raise PrimusError(f"{path}: modules is {_kind(modules_tree)}; Primus takes a mapping of trainer modules "
                          f"(modules: {{pre_trainer: {{framework: ..., config: ..., model: ...}}}})")
    env = tree.get("env") or {}
    if not isinstance(env, dict):
        raise PrimusError(f"{path}: env is {_kind(env)}; Primus takes a mapping of variable names to values")
    warnings = [f"{path.name}: `{key}` at the top level is ignored by Primus (only modules.<trainer>.overrides reach "
                f"the trainer); not imported" for key in tree if key not in EXPERIMENT_KEYS]
    modules = []
    for name, module in modules_tree.items():
        if "trainer" not in name:
            raise PrimusError(f"{path}: modules.{name} is not a trainer module (Primus runs only *trainer* modules)")
        if not isinstance(module, dict) or "framework" not in module:
            raise PrimusError(f"{path}: modules.{name} has no framework")
        framework = plain(module["framework"])
        if frameworks is not None and framework in NOT_LLM_FRAMEWORKS:
            raise SetApart(f"{path}: framework={framework}: {NOT_LLM_FRAMEWORKS[framework]}")
        if frameworks is not None and framework not in frameworks:
            raise PrimusError(f"{path}: framework={framework}: not importable (this project's "
                              f"backends: {', '.join(frameworks)})")
        folder = Path(str(plain(module.get("model", "")))).parent.as_posix()
        if frameworks is not None and folder in NOT_LLM_MODEL_FOLDERS:
            raise SetApart(f"{path}: model {plain(module['model'])}: {NOT_LLM_MODEL_FOLDERS[folder]}")
        modules.append(_trainer_module(path, name, module, primus_root, reading))
    return PrimusExperiment(path, {key: tree[key] for key in META_KEYS}, modules, dict(env),
                            reading.warnings + warnings)


_ABSENT = object()


def _kind(value: Any) -> str:
    return {list: "a list", str: "text", dict: "a mapping", type(None): "empty"}.get(type(value), type(value).__name__)


def _check_platform(path: Path, platform: Any, primus_root: Path, reading: _Reading) -> None:
    """PrimusParser.parse_platform: an experiment's `platform:` names a platform file with the keys Primus needs."""
    if platform is _ABSENT:
        return
    if not isinstance(platform, dict) or not isinstance(plain(platform.get("config")), str):
        raise PrimusError(f"{path}: platform must name its file (platform: {{config: platform_azure.yaml}}), as "
                          f"Primus requires")
    file = Path(primus_root) / "primus" / "configs" / "platforms" / plain(platform["config"])
    if not file.is_file():
        raise PrimusError(f"{path}: platform.config={plain(platform['config'])}: no such file in {file.parent}")
    platform_tree = reading.read(file)
    overrides = platform.get("overrides")
    if isinstance(overrides, dict):
        platform_tree = deep_merge(platform_tree, overrides)
    missing = [key for key in PLATFORM_KEYS if key not in platform_tree]
    if missing:
        raise PrimusError(f"{path}: the platform {plain(platform['config'])} lacks {', '.join(missing)}, which Primus "
                          f"requires")


def preset_path(primus_root: Path, kind: str, framework: str, name: str, where: str) -> Path:
    configs = primus_root / "primus" / "configs"
    file = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    preset = (configs / kind / framework / file).resolve()
    if configs.resolve() not in preset.parents:
        raise PrimusError(f"{where}: preset {name!r} points outside {configs}")
    if not preset.is_file():
        if not configs.is_dir():
            raise PrimusError(f"{where}: task.primus_root={primus_root} is not a Primus checkout (no primus/configs)")
        raise PrimusError(f"{where}: the {kind[:-1]} preset {file} is not in {configs / kind / framework}")
    return preset


def _trainer_module(path: Path, name: str, module: dict, primus_root: Path, reading: _Reading) -> TrainerModule:
    where = f"{path}: modules.{name}"
    framework = plain(module["framework"])
    for key in ("config", "model"):
        if key not in module:
            raise PrimusError(f"{where} has no {key} (Primus needs a module preset and a model preset)")
        if not isinstance(plain(module[key]), str) or not plain(module[key]):
            raise PrimusError(f"{where}.{key}={plain(module[key])!r}: Primus takes a preset file name")
    if not isinstance(framework, str):
        raise PrimusError(f"{where}.framework={framework!r}: Primus takes a framework name")
    config, model = plain(module["config"]), module["model"]
    module_keys = {key: value for key, value in module.items()
                   if key not in RESERVED_MODULE_KEYS and not key.startswith("_")}
    # copies: the merges below assign into the namespace's mappings, and the files' trees are cached
    namespace = tree_copy(reading.read(preset_path(primus_root, "modules", framework, config, where)))
    namespace.update(name=f"modules.{name}.config", framework=framework)
    for key, value in module_keys.items():
        namespace.setdefault(key, value)
    model_preset = tree_copy(reading.read(preset_path(primus_root, "models", framework, plain(model), where)))
    model_preset.setdefault("model", model)
    for key, value in model_preset.items():
        if key != "name" and key in namespace and plain(namespace[key]) != plain(value) \
                and key not in ("framework", "model"):
            reading.warnings.append(f"{path.name}: the model preset's {key}={_short(shown(value))} is shadowed by "
                                    f"the module's {_short(shown(namespace[key]))} (Primus keeps the module's); "
                                    f"imported as Primus runs it")
    merge_into_namespace(namespace, {key: value for key, value in model_preset.items()
                                     if key != "name" and key not in namespace})
    preset_params = runtime_params(namespace, where)
    overrides = module.get("overrides")
    if overrides is not None and not isinstance(overrides, dict):
        raise PrimusError(f"{where}.overrides is {_kind(overrides)}; Primus merges a mapping of keys to values")
    if "overrides" in module and overrides is not None:
        merge_into_namespace(namespace, overrides)
    return TrainerModule(name, framework, config, model, runtime_params(namespace, where), preset_params,
                         dict(overrides or {}), model_preset, module_keys)


def runtime_params(namespace: dict, where: str) -> dict:
    """primus_config._normalize_module_for_runtime: what the trainer reads as `params`."""
    base = namespace.get("params")
    if base is not None and not isinstance(base, dict):
        raise PrimusError(f"{where}: params is {_kind(base)}; Primus takes a mapping")
    params = tree_copy(base or {})
    for key, value in namespace.items():
        if key not in RUNTIME_RESERVED_KEYS and not key.startswith("_"):
            params[key] = value
    if "model" in namespace:
        params["model"] = namespace["model"]
    return params


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
