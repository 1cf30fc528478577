"""torchtitan's flavor tables (TrainSpec.model_args of each model), as plain data read by attribute.

Reading them imports torchtitan, and with it torch, datasets and inductor: 4-5 s on this 2-core machine, a third of
what task=import's own process spends on a folder of Primus's examples, during which its checking processes wait
for work. An import whose files name torchtitan (at a release whose tables are read: migrate/torchtitan_flavors.py)
has them read at its start by a helper process (read_ahead), beside the other files' work; the first flavor looked
up waits for what is left of it. Anywhere else, or where the helper fails, a table is read in this process when
first asked for. Both read with the same function (read_tables) from the same sys.path.

What the helper read is kept in the user's cache (util/user_cache.py: `torchtitan_tables/<key>.json`), under a key of
everything the tables come from: Python's and torch's versions, torchtitan's version and the path, size and
modification time of each of its source files, the models asked for and this reader's format. A later import on
the same installation reads them from there (~5 ms instead of the helper's ~6 s of CPU beside the import's own work);
an upgraded or edited torchtitan is another key, read again.
"""
from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from primus_hydra.config.values import PlainTree
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.ledger import PUBLIC_MODE, _atomic_write
from primus_hydra.migrate.source_files import read_source_text
from primus_hydra.util.installed import installed_versions
from primus_hydra.util.user_cache import user_cache_dir

# The helper lives for the imports and one JSON line: no collector pass over what the imports make (1,198 passes,
# 0.78 s of its ~5 s here)
READER = ("import gc, json, sys\n"
          "gc.disable()\n"
          "sys.path[:] = json.loads(sys.argv[1])\n"
          "from primus_hydra.migrate.torchtitan_registry import read_tables\n"
          "json.dump(read_tables(sys.argv[2:]), sys.stdout)\n")
_tables: dict[str, Optional[dict]] = {}  # model -> {flavor: its args as nested dicts}; None: no such model
_reader: Optional[subprocess.Popen] = None
_kept_at: Optional[Path] = None  # the cache file the helper's tables go to once read
TABLES_FORMAT = 1  # what read_tables records: a change there is a new format, and so a new key


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
            if _read_kept(models):
                return
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
        read = json.loads(output) if ok else {}
    except ValueError:
        return
    _tables.update(read)
    if read and _kept_at is not None:
        _keep(_kept_at, output)


def _read_kept(models: list[str]) -> bool:
    """The tables of `models` from the user's cache where it holds them for this installation (then True); else
    where the helper's go once read (_kept_at)."""
    global _kept_at
    _kept_at = kept_tables_file(models)
    if _kept_at is None:
        return False
    try:
        kept = json.loads(_kept_at.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(kept, dict) or sorted(kept) != models:
        return False
    _tables.update(kept)
    return True


def kept_tables_file(models: list[str]) -> Optional[Path]:
    """The cache file of the installed torchtitan's tables of `models` (None: no torchtitan found on sys.path)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torchtitan")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    key = installation_key(Path(list(spec.submodule_search_locations)[0]), models)
    return user_cache_dir() / "torchtitan_tables" / f"{key}.json" if key is not None else None


def installation_key(package: Path, models: list[str]) -> Optional[str]:
    """A digest of everything the tables of `models` read from `package` (the module's docstring)."""
    files = []
    try:
        for folder, _, names in os.walk(package):
            for name in names:
                if name.endswith(".py"):
                    path = Path(folder) / name
                    stat = path.stat()
                    files.append((str(path.relative_to(package)), stat.st_size, stat.st_mtime_ns))
    except OSError:
        return None
    described = {"format": TABLES_FORMAT, "python": sys.version, "versions": installed_versions(["torch", "torchtitan"]),
                 "package": str(package.resolve()), "files": sorted(files), "models": models}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:32]


def _keep(path: Path, text: bytes) -> None:
    """The helper's output kept at `path` (atomically; a cache that cannot be written is only not kept)."""
    try:
        _atomic_write(path, text.decode(), PUBLIC_MODE)
    except (PrimusError, UnicodeDecodeError):
        pass


def _tree(value: Any) -> Any:
    """Nested dicts read by attribute; sequences as lists, as both ways of reading give them."""
    if isinstance(value, dict):
        return PlainTree({key: _tree(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return [_tree(item) for item in value]
    return value
