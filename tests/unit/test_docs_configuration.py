"""docs/configuration.md against the schema: every key of every schema has a row, every row names a key that
exists, and each row's allowed options and default are the schema's. The page is written by hand; this keeps it
true."""
from __future__ import annotations

import dataclasses
import re
import typing
from enum import Enum
from pathlib import Path

import pytest
from omegaconf import MISSING

from primus_hydra.backends.schemas import BACKEND_SCHEMAS
from primus_hydra.config.schema import PrimusConfig
from primus_hydra.config.schema_run import BackendConfig
from primus_hydra.config.schema_task import TASK_SCHEMAS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
SECTIONS = ("platform", "module", "model", "launch", "patches", "sweep", "task", "backend", "hardware")


def schema_leaves() -> dict[str, dataclasses.Field]:
    """key path -> field, for every leaf of the root schema and of every backend and task schema."""
    leaves: dict[str, dataclasses.Field] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            field.type = hints[field.name]
            if dataclasses.is_dataclass(field.type):
                walk(field.type, f"{prefix}{field.name}.")
            else:
                leaves[f"{prefix}{field.name}"] = field

    for section in SECTIONS:
        if section not in ("backend", "task"):
            walk(typing.get_type_hints(PrimusConfig)[section], f"{section}.")
    for schema in (BackendConfig, *BACKEND_SCHEMAS.values()):
        walk(schema, "backend.")
    for schema in TASK_SCHEMAS.values():
        walk(schema, "task.")
    return leaves


def documented_rows() -> dict[str, dict[str, str]]:
    """key path -> {column header: cell} of every table row that documents a key. A table under a heading
    `### \\`model.moe.*\\`` names its keys relative to that prefix."""
    rows: dict[str, dict[str, str]] = {}
    prefix, header = "", []
    for line in DOC.read_text().splitlines():
        heading = re.match(r"#+ `([a-z0-9_.]+)\.\*`", line)
        if line.startswith("#"):
            prefix = heading.group(1) + "." if heading else ""
            continue
        if not line.startswith("|"):
            header = [] if not line.strip() else header
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells and cells[0] in ("Key", "key"):
            header = cells
            continue
        key = re.fullmatch(r"`([a-z_][a-z0-9_.]*)`", cells[0]) if cells else None
        if not key or not header:
            continue
        path = key.group(1) if "." in key.group(1) else prefix + key.group(1)
        if path.split(".")[0] in SECTIONS:
            rows.setdefault(path, dict(zip(header, cells)))
    return rows


LEAVES, ROWS = schema_leaves(), documented_rows()


def test_every_key_of_the_schema_is_documented():
    missing = sorted(set(LEAVES) - set(ROWS))
    assert not missing, f"docs/configuration.md has no row for: {', '.join(missing)}"


def test_every_documented_key_exists():
    unknown = sorted(set(ROWS) - set(LEAVES))
    assert not unknown, f"docs/configuration.md documents keys no schema has: {', '.join(unknown)}"


def _choice_type(field: dataclasses.Field):
    kind = field.type
    options = typing.get_args(kind) if typing.get_origin(kind) is typing.Union else (kind,)
    choice = next((option for option in options if isinstance(option, type) and issubclass(option, Enum)), None)
    return choice, type(None) in options


CHOICES = sorted(key for key, field in LEAVES.items() if _choice_type(field)[0] is not None)


@pytest.mark.parametrize("key", CHOICES)
def test_a_choice_lists_exactly_its_options(key):
    choice, optional = _choice_type(LEAVES[key])
    row = ROWS[key]
    allowed = row.get("Type / allowed") or row.get("Type")
    listed = set(re.findall(r"`([^`]+)`", allowed)) | ({"null"} if "null" in allowed else set())
    assert listed == {option.value for option in choice} | ({"null"} if optional else set()), f"{key}: {allowed}"


def _default_text(field: dataclasses.Field) -> str | None:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return None
    if value == MISSING:
        return "???"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return value.value
    return str(value)


def _same(documented: str, expected: str) -> bool:
    try:
        return float(documented) == float(expected)
    except ValueError:
        return documented == expected


DEFAULTS = sorted(key for key in LEAVES if key in ROWS and _default_text(LEAVES[key]) is not None)


@pytest.mark.parametrize("key", DEFAULTS)
def test_the_documented_default_is_the_schemas(key):
    row = ROWS[key]
    cell = row.get("Schema default", row.get("Default", ""))
    first = re.match(r"`([^`]*)`", cell)
    if first is None:  # a sentence instead of a value (`see below`): nothing to compare
        pytest.skip(f"{key}: default documented in words: {cell}")
    assert _same(first.group(1), _default_text(LEAVES[key])), f"{key}: documented {cell}, schema {_default_text(LEAVES[key])}"
