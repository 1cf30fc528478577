"""Primus's loader rules, stated a second time as a test oracle for task=import's reading (migrate/primus_yaml.py).

Written for the tests from Primus's behaviour, with Primus's own data shapes (a SimpleNamespace per mapping) so that
it does not share code or structure with the importer. scripts/check_primus_loader.py holds this oracle against
Primus's own PrimusParser on the same generated trees (by hand: CI has no Primus checkout).

    params = primus_params(experiment_file, primus_root, environ)   # what Primus's trainer reads as `params`
"""
from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml


class PrimusRefuses(Exception):
    """Primus's loader would stop on this input."""


def _scalar(text: str) -> Any:
    low = text.lower()
    if low == "true" or low == "false":
        return low == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)", text):
        return float(text)
    return text


def _env(value: Any, environ: dict) -> Any:
    if isinstance(value, dict):
        return {key: _env(item, environ) for key, item in value.items()}
    if isinstance(value, list):
        return [_env(item, environ) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match) -> str:
        name, fallback = match.group(1), match.group(2)
        if fallback is None and name not in environ:
            raise PrimusRefuses(f"{name} is required")
        return environ[name] if name in environ else fallback

    out = re.sub(r"\$\{([^:{}]+)(?::([^}]*))?\}", one, value)
    return value if out == value else _scalar(out)


def _merged(low: dict, high: dict) -> dict:
    result = copy.deepcopy(low)
    for key, value in high.items():
        both = isinstance(result.get(key), dict) and isinstance(value, dict)
        result[key] = _merged(result[key], value) if both else value
    return result


def parse_file(path: Path, environ: dict) -> dict:
    data = yaml.safe_load(Path(path).read_text())
    if data is None:
        raise PrimusRefuses("empty")
    data = _env(data, environ)
    if "extends" not in data:
        return data
    parents = data["extends"]
    if isinstance(parents, str):
        parents = [parents]
    if parents is None or isinstance(parents, dict):
        raise PrimusRefuses("extends shape")
    base: dict = {}
    for parent in parents:
        if not isinstance(parent, str):
            raise PrimusRefuses("extends entry")
        base = _merged(base, parse_file(Path(os.path.dirname(path)) / parent, environ))
    return _merged(base, {key: value for key, value in data.items() if key != "extends"})


def _ns(value: Any) -> Any:
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise PrimusRefuses("non-string key")
        return SimpleNamespace(**{key: _ns(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_ns(item) for item in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, SimpleNamespace):
        return {key: _plain(item) for key, item in vars(value).items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _put(namespace: SimpleNamespace, tree: dict) -> None:
    """Primus writes a merged mapping back into a namespace: mappings it holds already key by key, a leaf `null`
    text as None, a new mapping whole."""
    for key, value in tree.items():
        held = getattr(namespace, key, None)
        if isinstance(value, dict) and isinstance(held, SimpleNamespace):
            _put(held, value)
        elif isinstance(value, dict):
            setattr(namespace, key, _ns(value))
        else:
            setattr(namespace, key, None if value == "null" else _ns(value))


def _merge_into(namespace: SimpleNamespace, tree: dict) -> None:
    _put(namespace, _merged(_plain(namespace), tree))


def _preset(root: Path, kind: str, framework: str, name: Any, environ: dict) -> dict:
    if not isinstance(name, str):
        raise PrimusRefuses("preset name")
    file = name if name.endswith((".yaml", ".yml")) else name + ".yaml"
    return parse_file(Path(root) / "primus" / "configs" / kind / framework / file, environ)


def primus_params(experiment: Path, root: Path, environ: dict) -> dict:
    """modules.<the one trainer>.params as Primus's runtime receives them."""
    exp = _ns(parse_file(experiment, environ))
    for key in ("work_group", "user_name", "exp_name", "workspace", "modules"):
        if not hasattr(exp, key):
            raise PrimusRefuses(f"no {key}")
    (trainer, module), = vars(exp.modules).items()
    for key in ("framework", "config", "model"):
        if not hasattr(module, key):
            raise PrimusRefuses(f"no {key}")
    kept = {key: value for key, value in vars(module).items()
            if key not in {"name", "framework", "config", "model", "overrides", "params"} and key[:1] != "_"}
    config = _ns(_preset(root, "modules", module.framework, module.config, environ))
    config.name, config.framework = "config", module.framework
    for key, value in kept.items():
        if not hasattr(config, key):
            setattr(config, key, value)
    model = _ns(_preset(root, "models", module.framework, module.model, environ))
    if not hasattr(model, "model"):
        model.model = module.model
    _merge_into(config, {key: value for key, value in _plain(model).items()
                         if key != "name" and not hasattr(config, key)})
    if hasattr(module, "overrides") and module.overrides is not None:
        _merge_into(config, _plain(module.overrides))
    params = _plain(getattr(config, "params", None) or SimpleNamespace())
    for key, value in vars(config).items():
        if key not in {"name", "framework", "config", "model", "params", "trainer_class"} and key[:1] != "_":
            params[key] = _plain(value)
    params["model"] = _plain(config.model)
    return params
