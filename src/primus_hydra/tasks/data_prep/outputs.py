"""What task=prepare_data writes for task.out=<out>: `<out>_<key>_document.bin/.idx` per key (Megatron-LM's tool's
names) and `<out>_stats.json`. Each file is written under a temporary name in the same folder and renamed into place
when the whole run is done, the stats file last: it records the inputs' fingerprint (each file's size and
modification time, the tokenizer's digest, the options that change the ids), so a rerun knows it is up to date.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from primus_hydra.backends.common.indexed_stats import STATS_SUFFIX, dataset_signature
from primus_hydra.tasks.data_prep.inputs import InputFile
from primus_hydra.tasks.data_prep.tokenizer import TokenizerSpec

PARTIAL_MARK = ".partial-"  # in a temporary file's name, before the writer's process id


@dataclass(frozen=True)
class OutputNames:
    out: Path  # task.out, absolute
    level: str = "document"  # "sentence" with task.split_sentences (Megatron-LM's tool's names)

    def prefix(self, key: str) -> Path:
        return self.out.parent / f"{self.out.name}_{key}_{self.level}"

    @property
    def stats(self) -> Path:
        return self.out.parent / f"{self.out.name}{STATS_SUFFIX}"

    def files(self, keys: list) -> list[Path]:
        """Every file a run writes, the stats file last."""
        return [Path(f"{self.prefix(key)}{suffix}") for key in keys for suffix in (".bin", ".idx")] + [self.stats]

    @staticmethod
    def partial(final: Path) -> Path:
        """The temporary name `final` is written under: hidden, beside it (a rename stays on one file system)."""
        return final.parent / f".{final.name}{PARTIAL_MARK}{os.getpid()}"


def fingerprint(files: list[InputFile], tokenizer: TokenizerSpec, options: dict) -> str:
    """A digest of what decides the outputs' bytes (not task.workers: any number writes the same bytes)."""
    described = {"inputs": [[str(file.path), file.size, file.mtime_ns, file.format] for file in files],
                 "tokenizer": tokenizer.digest, "options": options}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def read_stats(names: OutputNames) -> Optional[dict]:
    try:
        stats = json.loads(names.stats.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stats if isinstance(stats, dict) else None


def is_up_to_date(names: OutputNames, keys: list, expected_fingerprint: str) -> bool:
    """The stats file records this fingerprint and every dataset is still the one it describes."""
    stats = read_stats(names)
    if stats is None or stats.get("fingerprint") != expected_fingerprint:
        return False
    datasets = stats.get("datasets")
    for key in keys:
        prefix = names.prefix(key)
        entry = datasets.get(prefix.name) if isinstance(datasets, dict) else None
        try:
            if not isinstance(entry, dict) or dataset_signature(prefix) != entry.get("signature"):
                return False
        except OSError:
            return False
    return True


def existing_outputs(names: OutputNames, keys: list) -> list[Path]:
    return [path for path in names.files(keys) if path.exists() or path.is_symlink()]


def write_json_atomically(path: Path, document: Any) -> None:
    partial = OutputNames.partial(path)
    partial.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def remove_partials(paths: list[Path]) -> None:
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
