"""What task=import wrote into task.out, so that nothing a user has there is lost or silently replaced.

`<out>/.primus_import.json` records, for each file an import wrote, the sha256 of what it wrote and the Primus
file it came from. A file is rewritten only when it is exactly what an import of the same source wrote (a re-import
after the source changed); a file that was edited since, or that no import wrote, is kept and named. A generated
model file is never changed once written: a model with other numbers gets another name. Writes are atomic (a
temporary file renamed over the target) and the record is updated after each experiment's files (write_all).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from primus_hydra.errors import PrimusError

LEDGER_FILE = ".primus_import.json"
PRIVATE_MODE, PUBLIC_MODE = 0o600, 0o644


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    sha256: str
    source: str


class Ledger:
    def __init__(self, out: Path):
        self.out = out
        self.path = out / LEDGER_FILE
        self.entries: dict[str, Entry] = {}
        self.unreadable = False
        self._lines: dict[str, tuple[Entry, str]] = {}  # name -> (the entry, its line of the record)
        try:
            recorded = json.loads(self.path.read_text())
            self.entries = {name: Entry(**entry) for name, entry in recorded["files"].items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.unreadable = True  # every existing file then counts as the user's: kept

    def state(self, relative: str) -> str:
        """'absent', 'ours' (exactly what an import wrote), or 'kept' (edited since, or not an import's)."""
        path = self.out / relative
        if not path.exists() and not path.is_symlink():
            return "absent"
        entry = self.entries.get(relative)
        if entry is None or not path.is_file() or path.is_symlink():
            return "kept"
        try:
            return "ours" if digest(path.read_text()) == entry.sha256 else "kept"
        except (OSError, UnicodeDecodeError):
            return "kept"

    def source_of(self, relative: str) -> Optional[str]:
        entry = self.entries.get(relative)
        return entry.source if entry else None

    def holds(self, relative: str, text: str) -> bool:
        """The file is there, unedited, with exactly this text."""
        return self.state(relative) == "ours" and self.entries[relative].sha256 == digest(text)

    def write_all(self, files: list[tuple[str, str, str, bool]]) -> None:
        """Each (relative path, text, source, private) written, then the record saved once."""
        try:
            for relative, text, source, private in files:
                path = self.out / relative
                if path.is_dir():
                    raise PrimusError(f"{path} is a folder where task=import writes a file; move it or choose another "
                                      f"task.out")
                _atomic_write(path, text, PRIVATE_MODE if private else PUBLIC_MODE)
                self.entries[relative] = Entry(digest(text), source)
        finally:  # what was written is recorded, whatever stopped the rest
            self._save()

    def _save(self) -> None:
        """The record, one file per line, saved after each experiment: each entry's line is rendered once (json's C
        encoder) and kept with the entry it renders, so a save of a folder of ~400 experiments (~1000 lines) joins
        them rather than rendering every line again (~3 ms a file by the end)."""
        lines = []
        for name in sorted(self.entries):
            entry = self.entries[name]
            rendered = self._lines.get(name)
            if rendered is None or rendered[0] is not entry:  # an Entry is frozen: replaced, never changed
                rendered = self._lines[name] = (entry, f"  {json.dumps(name)}: {json.dumps(vars(entry))}")
            lines.append(rendered[1])
        body = ",\n".join(lines)
        text = f'{{\n "written_by": "primus-hydra task=import",\n "files": {{\n{body}\n }}\n}}\n'
        _atomic_write(self.path, text, PRIVATE_MODE)


def _atomic_write(path: Path, text: str, mode: int) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(descriptor, "w") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text)
        os.replace(temporary, path)
    except OSError as error:
        raise PrimusError(f"{path}: cannot be written ({error.strerror}); choose a task.out you can write") from None
