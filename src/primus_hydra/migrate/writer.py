"""An imported experiment as files of a Hydra config dir: `<out>/experiment/<stem>.yaml` (`# @package _global_`)
and, for a model the zoo does not have exactly, `<out>/model/<name>.yaml`. Existing files are replaced only when
they were written by task=import (their first line says so); a file of the user's is never overwritten."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from primus_hydra.errors import PrimusError
from primus_hydra.migrate.mapping import Imported
from primus_hydra.migrate.models import generated_model_text
from primus_hydra.migrate.primus_yaml import EnvString, EnvValue, PrimusExperiment, TrainerModule, plain

MARK = "# @package _global_"
IMPORTED_MARK = "# Imported by primus-hydra task=import"
SAFE_DEFAULT = re.compile(r"^[\w./:@+-]*$")
RESOLVED_DIR = "primus_resolved"  # <out>/primus_resolved/<stem>.yaml: the module's every key as Primus resolved it


def resolved_text(experiment: PrimusExperiment, module: TrainerModule) -> str:
    header = (f"{IMPORTED_MARK}: modules.{module.name} of {experiment.path} as Primus's loader resolves it "
              f"(module preset, model preset, overrides), for reference; nothing reads this file\n")
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return header + yaml.dump(plain(module.params), Dumper=dumper, sort_keys=False, default_flow_style=False)


class _Interpolation(str):
    """A string written without quotes where YAML allows it (`${...}` needs none)."""


def env_interpolation(value: EnvValue) -> str:
    default = value.default or ""
    if not SAFE_DEFAULT.match(default) or default == "":
        default = "'" + default.replace("\\", "\\\\").replace("'", "\\'") + "'"
    # oc.decode types the text as Primus does ("4096" -> 4096, "true" -> true, "null" -> null)
    return f"${{oc.decode:${{oc.env:{value.var},{default}}}}}"


def _yaml_ready(value: Any) -> Any:
    if isinstance(value, EnvValue):
        return env_interpolation(value)
    if isinstance(value, EnvString):  # built with an env default inside: the text Primus would use
        return str(value)
    if isinstance(value, dict):
        return {key: _yaml_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_ready(item) for item in value]
    return value


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
    canonical = dict(imported.canonical)
    canonical.update({f"model.{key}": value for key, value in choice.experiment.items()})
    tree = _nested(canonical)
    body["launch"] = {"nproc_per_node": imported.gpus_per_node, **tree.get("launch", {})}
    for section in ("model", "module", "backend"):
        if section in tree:
            body[section] = tree[section]
    if imported.extra_args:
        extra = _nested(imported.extra_args) if imported.backend == "torchtitan" else dict(imported.extra_args)
        body.setdefault("backend", {})["extra_args"] = extra
    if experiment.env:
        body["platform"] = {"env": {key: str(plain(value)) for key, value in experiment.env.items()}}
    text = yaml.safe_dump(_yaml_ready(body), sort_keys=False, default_flow_style=False, width=120)
    return _header(experiment, module, imported, stem, out) + text


def _header(experiment: PrimusExperiment, module: TrainerModule, imported: Imported, stem: str, out: Path) -> str:
    lines = [MARK, f"{IMPORTED_MARK} from {experiment.path}",
             f"# Primus: modules.{module.name}, framework={module.framework}, config={module.config}, "
             f"model={plain(module.model)}",
             f"# Run: python -m primus_hydra --config-dir {out} experiment={stem}"]
    if isinstance(module.model, (EnvValue, EnvString)):
        lines.append(f"# Primus picks the model preset from ${module.model.var} (default {module.model.default}); "
                     f"this file was imported with the default")
    where = "the experiment's env GPUS_PER_NODE" if "GPUS_PER_NODE" in experiment.env else \
        "Primus's GPUS_PER_NODE default"
    lines.append(f"# launch.nproc_per_node: {imported.gpus_per_node}, {where} (the layout the experiment was written "
                 f"for)")
    launcher = {key: plain(value) for key, value in experiment.meta.items()}
    lines.append("# Read only by Primus's own launcher: " + ", ".join(f"{key}={value}" for key, value in launcher.items())
                 + " (this project's run dir is hydra.run.dir)")
    if imported.primus_only:
        lines.append(f"# Read only by Primus itself (its logging and extensions), not imported "
                     f"({len(imported.primus_only)}):")
        lines.extend(f"#   {key}: {_short(value)}" for key, value in imported.primus_only.items())
    if imported.extra_args:
        lines.append(f"# Passed through to {imported.backend} unchanged (backend.extra_args): {len(imported.extra_args)}")
    lines.append(f"# Everything Primus resolved for this module, for reference: {RESOLVED_DIR}/{stem}.yaml")
    for warning in imported.warnings:
        lines.append(f"# Warning: {warning}")
    return "\n".join(lines) + "\n"


def _short(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    return text if len(text) <= 80 else text[:77] + "..."


def write_if_ours(path: Path, text: str) -> None:
    """Writes `path` unless a file that task=import did not write is there (then one line, nothing written)."""
    if path.exists():
        head = path.read_text(errors="replace").splitlines()[:2]
        if not any(line.startswith((IMPORTED_MARK, "# Generated by task=import")) for line in head):
            raise PrimusError(f"{path} exists and was not written by task=import; not overwritten (move it, or "
                              f"choose another task.out)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def model_file(imported: Imported, source: str) -> tuple[str, str]:
    return imported.model.name, generated_model_text(imported.model, source)
