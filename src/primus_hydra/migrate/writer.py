"""The texts of an imported experiment: `<out>/experiment/<name>.yaml` (`# @package _global_`), for a model the zoo
does not have exactly `<out>/model/<name>.yaml`, and `<out>/primus_resolved/<name>.yaml` (every key of the module
as Primus resolved it, for reference). Every value goes through migrate/emit.py; whether a file may be written is
migrate/ledger.py's decision."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from primus_hydra.config.secrets import REDACTED, is_secret_path
from primus_hydra.migrate import emit
from primus_hydra.migrate.mapping import Imported
from primus_hydra.migrate.models import generated_model_tree
from primus_hydra.migrate.primus_yaml import EnvString, EnvValue, PrimusExperiment, TrainerModule, plain, shown

MARK = "# @package _global_"
IMPORTED_MARK = "# Imported by primus-hydra task=import"
RESOLVED_DIR = "primus_resolved"  # <out>/primus_resolved/<stem>.yaml: the module's every key as Primus resolved it


def run_command(out: Path, name: str) -> str:
    """The command line that runs an imported experiment, quoted for a shell and for Hydra's override grammar."""
    return f"python -m primus_hydra --config-dir {shlex.quote(str(out))} " \
           f"{shlex.quote('experiment=' + hydra_value(name))}"


def hydra_value(text: str) -> str:
    """`text` as a value of a Hydra override (quoted where the grammar would read it otherwise: `,` `=` spaces)."""
    import re

    if re.fullmatch(r"[\w./+-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def resolved_text(experiment: PrimusExperiment, module: TrainerModule) -> str:
    """The reference file: every value as Primus resolves it, but a value read from the environment under a
    secret-looking name, which is `<redacted>`."""
    def value_of(path: tuple, value: Any) -> Any:
        if isinstance(value, (EnvValue, EnvString)) and value.from_environment and is_secret_path(path):
            return REDACTED
        return plain(value)

    tree = _map_leaves(module.params, value_of)
    header = emit.comment(f"{IMPORTED_MARK[2:]}: modules.{module.name} of {experiment.path} as Primus's loader "
                          f"resolves it (module preset, model preset, overrides), for reference; nothing reads it")
    where = f"{experiment.path}: modules.{module.name}"
    return header + "\n" + emit.dump(emit.yaml_ready(tree, where), where)


def _map_leaves(node: Any, value_of, path: tuple = ()) -> Any:
    if isinstance(node, dict):
        return {key: _map_leaves(value, value_of, path + (str(key),)) for key, value in node.items()}
    if isinstance(node, list):
        return [_map_leaves(value, value_of, path + (str(index),)) for index, value in enumerate(node)]
    return value_of(path, node)


def _nested(dotted: dict) -> dict:
    tree: dict = {}
    for key, value in dotted.items():
        table = tree
        *parents, leaf = key.split(".")
        for parent in parents:
            table = table.setdefault(parent, {})
        table[leaf] = value
    return tree


def experiment_text(experiment: PrimusExperiment, module: TrainerModule, imported: Imported, stem: str,
                    out: Path) -> str:
    choice = imported.model
    body: dict = {"defaults": [{"override /backend": imported.backend}, {"override /model": choice.preset}]}
    if module.name != "pre_trainer" or imported.canonical.get("module.stage") == "sft":
        body["defaults"].insert(0, {"override /module": "post_trainer"})
    if imported.logger:
        body["defaults"].append({"override /logger": imported.logger})
    canonical = dict(imported.canonical)
    canonical.update({f"model.{key}": value for key, value in choice.experiment.items()})
    tree = _nested(canonical)
    body["launch"] = {"nproc_per_node": imported.gpus_per_node, **tree.get("launch", {})}
    for section in ("model", "module", "backend", "logger"):
        if section in tree:
            body[section] = tree[section]
    if imported.extra_args:
        extra = _nested(imported.extra_args) if imported.backend == "torchtitan" else dict(imported.extra_args)
        body.setdefault("backend", {})["extra_args"] = extra
    if experiment.env:
        body["platform"] = {"env": {key: value if isinstance(value, (EnvValue, EnvString)) else str(plain(value))
                                    for key, value in experiment.env.items()}}
    where = f"{experiment.path}: modules.{module.name}"
    return _header(experiment, module, imported, stem, out) + emit.dump(emit.yaml_ready(body, where), where)


def _header(experiment: PrimusExperiment, module: TrainerModule, imported: Imported, stem: str, out: Path) -> str:
    lines = [f"{IMPORTED_MARK[2:]} from {experiment.path}",
             f"Primus: modules.{module.name}, framework={module.framework}, config={module.config}, "
             f"model={shown(module.model)}",
             f"Run: {run_command(out, stem)}"]
    if isinstance(module.model, (EnvValue, EnvString)):
        lines.append(f"Primus picks the model preset from {shown(module.model)}; this file was imported with "
                     f"{plain(module.model)}")
    where = "the experiment's env GPUS_PER_NODE" if "GPUS_PER_NODE" in experiment.env else \
        "Primus's GPUS_PER_NODE default"
    lines.append(f"launch.nproc_per_node: {imported.gpus_per_node}, {where} (the layout the experiment was written for)")
    launcher = ", ".join(f"{key}={shown(value)}" for key, value in experiment.meta.items())
    lines.append(f"Read only by Primus's own launcher: {launcher} (this project's run dir is hydra.run.dir)")
    if imported.primus_only:
        lines.append(f"Read only by Primus itself (its logging and extensions), not imported "
                     f"({len(imported.primus_only)}):")
        lines.extend(f"  {key}: {_short(value)}" for key, value in imported.primus_only.items())
    if imported.extra_args:
        lines.append(f"Passed through to {imported.backend} unchanged (backend.extra_args): {len(imported.extra_args)}")
    lines.append(f"Everything Primus resolved for this module, for reference: {RESOLVED_DIR}/{stem}.yaml")
    lines.extend(f"Warning: {warning}" for warning in imported.warnings)
    return "\n".join([MARK] + [emit.comment(line) for line in lines]) + "\n"


def _short(value: Any) -> str:
    text = yaml.safe_dump(shown(value), default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    return text if len(text) <= 80 else text[:77] + "..."


def model_text(imported: Imported, source: str) -> str:
    """<out>/model/<name>.yaml: the base zoo preset with the Primus numbers over it."""
    choice = imported.model
    changes = ", ".join(f"{key}={value}" for key, value in choice.generated.items())
    header = "\n".join(emit.comment(line) for line in (
        f"Generated by task=import from the Primus model preset {source}:", f"model={choice.zoo} with {changes}"))
    where = f"model preset {source}"
    return header + "\n" + emit.dump(emit.yaml_ready(generated_model_tree(choice), where), where)
