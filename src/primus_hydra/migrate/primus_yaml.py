"""Primus's experiment semantics, reproduced (its loader: primus/core/config/yaml_loader.py and
primus/core/launcher/parser.py's PrimusParser; read, not copied):

- `${VAR:default}` (and `${VAR}`, which needs VAR set) is replaced in every string of a file before its
  `extends:` are merged; a string that changed is typed ("4096" -> 4096, "true" -> True, "null" -> None);
- `extends:` (a list or one path, relative to the file): the presets deep-merged in order, then the file's own keys;
  dicts merge key by key, anything else (lists too) is replaced;
- a trainer module = its module preset (primus/configs/modules/<framework>/<config>) with the model preset's
  top-level keys added where the module preset has none (a shadowed model key is dropped, not merged), then the
  module's `overrides` deep-merged on top (they may add keys).

A value that came from an env default is kept as an EnvValue, so that the imported experiment can keep reading the
variable (`${oc.env:VAR,default}`).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from primus_hydra.errors import PrimusError

ENV_REFERENCE = re.compile(r"\$\{([^:{}]+)(?::([^}]*))?\}")
FLOAT = re.compile(r"^-?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)$")
META_KEYS = ("work_group", "user_name", "exp_name", "workspace")
EXPERIMENT_KEYS = set(META_KEYS) | {"modules", "platform", "env"}


@dataclass(frozen=True)
class EnvValue:
    """A value Primus took from `${VAR:default}` (the whole string): what it resolved to, and how."""
    value: Any
    var: str
    default: Optional[str]


class EnvString(str):
    """A string Primus built with `${VAR:default}` inside it (e.g. `${PRIMUS_MODEL:llama3_8B}.yaml`)."""

    var: str = ""
    default: Optional[str] = None


@dataclass
class TrainerModule:
    name: str  # pre_trainer | post_trainer | sft_trainer ...
    framework: str
    config: str
    model: Any  # the model preset file name (an EnvValue when env-driven)
    params: dict  # module preset + model preset + overrides, as Primus resolves them
    preset_params: dict  # module preset + model preset, before the overrides
    overrides: dict  # the experiment's own `overrides` (what its author set)
    model_preset: dict  # the model preset alone
    extra: dict = field(default_factory=dict)  # module-level attributes (trainer_class, ...)


@dataclass
class PrimusExperiment:
    path: Path
    meta: dict
    modules: list[TrainerModule]
    env: dict
    warnings: list[str]


def plain(value: Any) -> Any:
    """The resolved value, EnvValue wrappers removed (recursively)."""
    if isinstance(value, EnvValue):
        return value.value
    if isinstance(value, EnvString):
        return str(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def dotted_get(tree: Any, path: str, default: Any = None) -> Any:
    """tree["a"]["b"] for path "a.b"; `default` where a part is missing."""
    node = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _typed(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if FLOAT.fullmatch(text):
        return float(text)
    return text


def substitute(text: str, environ: dict, where: str) -> Any:
    def replace(match: re.Match) -> str:
        var, default = match.group(1), match.group(2)
        if var in environ:
            return environ[var]
        if default is None:
            raise PrimusError(f"{where}: ${{{var}}} needs the environment variable {var}, which is not set "
                              f"(Primus requires it too); set it or give a default: ${{{var}:value}}")
        return default

    replaced = ENV_REFERENCE.sub(replace, text)
    if replaced == text:
        return text
    value = _typed(replaced)
    whole = ENV_REFERENCE.fullmatch(text)
    if whole and whole.group(1) not in environ:  # the default, from `${VAR:default}` alone: keep reading VAR
        return EnvValue(value, whole.group(1), whole.group(2))
    first = ENV_REFERENCE.search(text)
    if isinstance(value, str) and first.group(1) not in environ:
        value = EnvString(value)
        value.var, value.default = first.group(1), first.group(2)
    return value


def _resolve_env(tree: Any, environ: dict, where: str) -> Any:
    if isinstance(tree, dict):
        return {key: _resolve_env(value, environ, where) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_resolve_env(value, environ, where) for value in tree]
    if isinstance(tree, str):
        return substitute(tree, environ, where)
    return tree


def deep_merge(base: dict, override: dict) -> dict:
    merged = copy.copy(base)
    for key, value in override.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_yaml(path: Path, environ: dict, cache: Optional[dict] = None) -> dict:
    """One Primus YAML file: env references replaced, then its `extends:` merged under it."""
    key = (str(path), tuple(sorted(environ.items())) if cache is not None else None)
    if cache is not None and key in cache:
        return cache[key]
    try:
        tree = yaml.load(path.read_text(), Loader=yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark else ""
        raise PrimusError(f"{path}: not valid YAML{at}: {getattr(error, 'problem', error)}") from None
    except OSError as error:
        raise PrimusError(f"{path}: cannot be read: {error.strerror}") from None
    if not isinstance(tree, dict):
        raise PrimusError(f"{path}: not a Primus config (a YAML mapping is expected)")
    tree = _resolve_env(tree, environ, str(path))
    extends = tree.pop("extends", None)
    if extends is not None:
        merged: dict = {}
        for name in [extends] if isinstance(extends, str) else list(extends):
            preset = path.parent / str(plain(name))
            if not preset.is_file():
                raise PrimusError(f"{path}: extends {plain(name)}, which does not exist ({preset})")
            merged = deep_merge(merged, read_yaml(preset, environ, cache))
        tree = deep_merge(merged, tree)
    if cache is not None:
        cache[key] = tree
    return tree


def load_experiment(path: Path, primus_root: Path, environ: dict, cache: Optional[dict] = None,
                    frameworks: Optional[dict] = None) -> PrimusExperiment:
    """The experiment as PrimusParser resolves it (PrimusError, one line naming the file, when it is not one);
    `frameworks`: the ones to accept (another is one line before its presets are looked for)."""
    tree = read_yaml(path, environ, cache)
    if "modules" not in tree:
        raise PrimusError(f"{path}: not a Primus experiment (it has no `modules:`)")
    text = yaml.safe_dump(plain({key: tree[key] for key in ("modules",)}))
    placeholder = re.search(r"<YOUR_[A-Z_]+>", text)
    if placeholder:
        raise PrimusError(f"{path}: a template, not an experiment (it still has the placeholder {placeholder.group(0)})")
    missing = [key for key in META_KEYS if key not in tree]
    if missing:
        raise PrimusError(f"{path}: not a Primus experiment (Primus requires {', '.join(missing)} at the top level)")
    warnings = [f"{path.name}: `{key}` at the top level is ignored by Primus (only modules.<trainer>.overrides reach "
                f"the trainer); not imported" for key in tree if key not in EXPERIMENT_KEYS]
    modules = []
    for name, module in (tree.get("modules") or {}).items():
        if "trainer" not in name:
            raise PrimusError(f"{path}: modules.{name} is not a trainer module (Primus runs only *trainer* modules)")
        if not isinstance(module, dict) or "framework" not in module:
            raise PrimusError(f"{path}: modules.{name} has no framework")
        if frameworks is not None and plain(module["framework"]) not in frameworks:
            raise PrimusError(f"{path}: framework={plain(module['framework'])}: not importable (this project's "
                              f"backends: {', '.join(frameworks)})")
        modules.append(_trainer_module(path, name, module, primus_root, environ, cache, warnings))
    return PrimusExperiment(path, {key: tree[key] for key in META_KEYS}, modules, dict(tree.get("env") or {}),
                            warnings)


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


def _trainer_module(path: Path, name: str, module: dict, primus_root: Path, environ: dict, cache: Optional[dict],
                    warnings: list[str]) -> TrainerModule:
    where = f"{path}: modules.{name}"
    framework = str(plain(module["framework"]))
    for key in ("config", "model"):
        if key not in module:
            raise PrimusError(f"{where} has no {key} (Primus needs a module preset and a model preset)")
    config, model = str(plain(module["config"])), module["model"]
    preset = read_yaml(preset_path(primus_root, "modules", framework, config, where), environ, cache)
    model_preset = read_yaml(preset_path(primus_root, "models", framework, str(plain(model)), where), environ, cache)
    if "model" not in model_preset:
        model_preset = {**model_preset, "model": plain(model)}
    params = dict(preset)
    for key, value in model_preset.items():
        if key == "name":
            continue
        if key in params:
            if plain(params[key]) != plain(value):
                warnings.append(f"{path.name}: the model preset's {key}={_short(plain(value))} is shadowed by the "
                                f"module preset's {_short(plain(params[key]))} (Primus keeps the module preset's); "
                                f"imported as Primus runs it")
            continue
        params[key] = value
    overrides = module.get("overrides") or {}
    preset_params, params = params, deep_merge(params, overrides)
    extra = {key: value for key, value in module.items()
             if key not in ("framework", "config", "model", "overrides", "name", "params")}
    return TrainerModule(name, framework, config, model, params, preset_params, overrides, model_preset, extra)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
