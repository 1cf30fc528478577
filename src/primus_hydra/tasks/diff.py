"""task=diff task.a=<run dir> task.b=<run dir>: what differs between two runs, from what each run dir recorded:
the overrides (.hydra/overrides.yaml), the composed config's keys (.hydra/config.yaml, interpolations as written),
and from .primus/provenance.json the commit and dirty flag, the code digest, Python's and the packages' versions,
the data files' fingerprints. Prints one section per kind of difference; `no differences` when there is none."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from primus_hydra.errors import PrimusError
from primus_hydra.launch.provenance import read_provenance, run_overrides
from primus_hydra.tasks.run_lookup import is_run_dir

MISSING_TEXT = "(absent)"


class DiffTask:
    writes_nothing = True  # a query: no run dir (tasks/callback.py)

    def __init__(self, cfg: DictConfig, job: Any = None, point: Optional[dict] = None):
        self.cfg = cfg

    def run(self) -> dict:
        a, b = (run_dir_arg(self.cfg.task.get(key), f"task.{key}") for key in ("a", "b"))
        sections = run_differences(a, b)
        print(format_differences(sections, a, b), flush=True)
        return sections


def run_dir_arg(value: Any, key: str) -> Path:
    if value is None or str(value).strip() == "":
        raise PrimusError(f"{key} is not set; task=diff compares two run dirs: task.a=<run dir> task.b=<run dir>")
    path = Path(str(value)).expanduser()
    if not path.is_dir() or not is_run_dir(path):
        raise PrimusError(f"{key}={value}: not a run dir (no .hydra/config.yaml or .primus/provenance.json there)")
    return path


def run_differences(a: Path, b: Path) -> dict[str, dict[str, tuple]]:
    """section -> {key: (value in a, value in b)} for every key whose values differ."""
    overrides_a, overrides_b = _override_map(a), _override_map(b)
    prov_a, prov_b = read_provenance(a) or {}, read_provenance(b) or {}
    sections = {
        "overrides": _changed(overrides_a, overrides_b),
        "config": _changed(flat_config(a), flat_config(b)),
        "code": _changed(_code(prov_a), _code(prov_b)),
        "packages": _changed({**prov_a.get("packages", {}), "python": prov_a.get("python", {}).get("version")},
                             {**prov_b.get("packages", {}), "python": prov_b.get("python", {}).get("version")}),
        "data": _changed(_data(prov_a), _data(prov_b)),
    }
    return {name: changed for name, changed in sections.items() if changed}


def _override_map(run_dir: Path) -> dict[str, str]:
    result = {}
    for override in run_overrides(run_dir) or []:
        key, _, value = override.partition("=")
        result[key] = value
    return result


def flat_config(run_dir: Path) -> dict[str, Any]:
    """The composed config as Hydra recorded it, one dotted key per leaf (interpolations as written)."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra" / "config.yaml"), resolve=False)
    except (OSError, ValueError):
        return {}
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix[:-1]] = node

    walk(config, "")
    return flat


def _code(record: dict) -> dict[str, Any]:
    git = record.get("git") or {}
    return {"commit": git.get("commit"), "branch": git.get("branch"), "dirty": git.get("dirty"),
            "code_digest": record.get("code_digest")}


def _data(record: dict) -> dict[str, Any]:
    return {entry.get("path", "?"): {key: value for key, value in entry.items() if key not in ("path", "first_files")}
            for entry in record.get("data", [])}


def _changed(a: dict, b: dict) -> dict[str, tuple]:
    return {key: (a.get(key, MISSING_TEXT), b.get(key, MISSING_TEXT))
            for key in sorted(set(a) | set(b)) if a.get(key, MISSING_TEXT) != b.get(key, MISSING_TEXT)}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def format_differences(sections: dict[str, dict[str, tuple]], a: Path, b: Path) -> str:
    if not sections:
        return f"no differences between {a} and {b}"
    lines = [f"a: {a}", f"b: {b}"]
    for name, changed in sections.items():
        lines.append(f"{name}:")
        lines += [f"  {key}: {_text(value_a)} -> {_text(value_b)}" for key, (value_a, value_b) in changed.items()]
    return "\n".join(lines)
