"""torchtitan's flavor tables (TrainSpec.model_args of each model), as plain data read by attribute.

Reading them imports torchtitan, and with it torch, datasets and inductor: 4-5 s on this 2-core machine, a third of
what task=import's own process spends on a folder of Primus's examples, during which its checking processes wait
for work. An import whose files name torchtitan (at a release whose tables are read: migrate/torchtitan_flavors.py)
has them read at its start by a helper process (read_ahead), beside the other files' work; the first flavor looked
up waits for what is left of it. Anywhere else, or where the helper fails, a table is read in this process when
first asked for. Both read with the same function (read_tables) from the same sys.path.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from primus_hydra.config.values import PlainTree
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.source_files import read_source_text

# The helper lives for the imports and one JSON line: no collector pass over what the imports make (1,198 passes,
# 0.78 s of its ~5 s here)
READER = ("import gc, json, sys\n"
          "gc.disable()\n"
          "sys.path[:] = json.loads(sys.argv[1])\n"
          "from primus_hydra.migrate.torchtitan_registry import read_tables\n"
          "json.dump(read_tables(sys.argv[2:]), sys.stdout)\n")
_tables: dict[str, Optional[dict]] = {}  # model -> {flavor: its args as nested dicts}; None: no such model
_reader: Optional[subprocess.Popen] = None


def read_ahead(files: Iterable[Path]) -> None:
    """Start reading the flavor tables in a helper process when any of `files` names torchtitan."""
    from primus_hydra.backends.torchtitan.args import TORCHTITAN_MODEL_NAMES  # the models the import translates

    global _reader
    if _reader is not None or _tables:
        return
    for path in files:
        try:
            named = "torchtitan" in read_source_text(path)  # regular files of a config's size only: never blocks
        except PrimusError:  # the file's own import says why it is not read
            continue
        if named:
            models = sorted(set(TORCHTITAN_MODEL_NAMES.values()))
            _reader = subprocess.Popen([sys.executable, "-c", READER, json.dumps(sys.path), *models],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            return


def stop_reading() -> None:
    """The helper stopped if it still runs (an import that needed no flavor); what it read is dropped."""
    global _reader
    if _reader is not None:
        _reader.kill()
        _reader.communicate()
        _reader = None


atexit.register(stop_reading)


def flavor_table(name: str) -> dict:
    """{flavor: its model args} of torchtitan's `name`; ValueError where the installed torchtitan has no such model."""
    _receive()
    if name not in _tables:
        _tables.update(read_tables([name]))
    table = _tables[name]
    if table is None:
        raise ValueError(f"torchtitan has no model {name}")
    return {flavor: _tree(args) for flavor, args in table.items()}


def read_tables(names: list[str]) -> dict[str, Optional[dict]]:
    """{model: {flavor: dataclasses.asdict(its args)}, or None where torchtitan has no such model} (imports it)."""
    from torchtitan.protocols.train_spec import get_train_spec

    tables: dict[str, Optional[dict]] = {}
    for name in names:
        try:
            spec = get_train_spec(name)
        except ValueError:
            tables[name] = None
            continue
        tables[name] = {flavor: dataclasses.asdict(args) for flavor, args in spec.model_args.items()}
    return tables


def _receive() -> None:
    """What the helper read, once it is done (nothing where it failed: the tables are then read here)."""
    global _reader
    if _reader is None:
        return
    output, _ = _reader.communicate()
    ok, _reader = _reader.returncode == 0, None
    try:
        _tables.update(json.loads(output) if ok else {})
    except ValueError:
        pass


def _tree(value: Any) -> Any:
    """Nested dicts read by attribute; sequences as lists, as both ways of reading give them."""
    if isinstance(value, dict):
        return PlainTree({key: _tree(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return [_tree(item) for item in value]
    return value
