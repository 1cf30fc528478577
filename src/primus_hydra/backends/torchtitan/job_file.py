"""The translated job config as torchtitan 0.2.x reads it: a TOML file (`--job.config_file`) parsed by the installed
torchtitan's own ConfigManager, which rejects a key it does not know (one line here, naming it).

The `model_args` section is not part of torchtitan's JobConfig: the trainer applies it over the flavor's model args.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from primus_hydra.errors import PrimusError

MODEL_ARGS = "model_args"
TOML_FILE = "torchtitan_job.toml"  # what a dry run writes: `torchrun -m torchtitan.train --job.config_file <it>`


def job_sections(backend_args: dict) -> dict:
    """The JobConfig sections of the translated arguments (without model_args), None values left out."""
    return {section: {key: value for key, value in values.items() if value is not None}
            for section, values in backend_args.items() if section != MODEL_ARGS and isinstance(values, dict)}


def toml_text(sections: dict) -> str:
    """TOML for sections of scalars and lists (all a JobConfig holds); nested tables are written as [a.b]."""
    lines: list[str] = []

    def table(name: str, values: dict) -> None:
        scalars = {k: v for k, v in values.items() if not isinstance(v, dict)}
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in scalars.items())
        lines.append("")
        for key, value in values.items():
            if isinstance(value, dict):
                table(f"{name}.{key}", value)

    for name, values in sections.items():
        table(name, values)
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a basic TOML string: JSON's escapes are TOML's


def write_job_file(backend_args: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(toml_text(job_sections(backend_args)))
    return path


def parse_job_file(path: Path) -> Any:
    """The installed torchtitan's JobConfig from the file, as `torchtitan.train --job.config_file` builds it."""
    from torchtitan.config import ConfigManager

    try:
        return ConfigManager().parse_args(["--job.config_file", str(path)])
    except ValueError as error:
        raise PrimusError(unknown_key_line(str(error))) from None


def unknown_key_line(message: str) -> str:
    """torchtitan's "Invalid field names in <class ...Training'> data: {'bogus'}" as one line naming the key."""
    import importlib.metadata

    version = importlib.metadata.version("torchtitan")
    match = re.search(r"Invalid field names in <class '[\w.]*\.(\w+)'> data: \{(.*?)\}", message)
    if not match:
        return f"backend=torchtitan: torchtitan {version} refuses the job config: {message.splitlines()[0]}"
    section, names = match.group(1), match.group(2).replace("'", "")
    where = "a section" if section == "JobConfig" else f"a key of its {section} section"
    return (f"backend=torchtitan: torchtitan {version} does not know {names} ({where}); check backend.extra_args "
            f"against this release's JobConfig (torchtitan.config.job_config)")
