"""The stats file task=prepare_data writes next to its indexed datasets (`<out>_stats.json`), as the launch check
reads it: each dataset's largest token id, trusted only while the dataset's signature (the sizes of its .bin and
.idx, and a digest of their first and last bytes) is the one recorded, so a multi-GB dataset is checked without
reading its tokens. Standard library only.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

STATS_SUFFIX = "_stats.json"
SIGNATURE_EDGE_BYTES = 1 << 16  # read from each end of each file


def dataset_signature(prefix: Path) -> str:
    """Sizes of <prefix>.bin and <prefix>.idx, and a digest of each file's first and last SIGNATURE_EDGE_BYTES."""
    return files_signature(Path(f"{prefix}.bin"), Path(f"{prefix}.idx"))


def files_signature(bin_path: Path, idx_path: Path) -> str:
    """dataset_signature of a .bin and .idx by their paths (as written under temporary names)."""
    digest, sizes = hashlib.blake2b(digest_size=16), []
    for path in (bin_path, idx_path):
        size = path.stat().st_size
        sizes.append(str(size))
        with path.open("rb") as handle:
            digest.update(handle.read(SIGNATURE_EDGE_BYTES))
            handle.seek(max(size - SIGNATURE_EDGE_BYTES, 0))
            digest.update(handle.read(SIGNATURE_EDGE_BYTES))
    return f"{'/'.join(sizes)}:{digest.hexdigest()}"


def stats_files_for(prefix: Path) -> list[Path]:
    """The stats files that may describe `prefix` (`<out>_<key>_document`): `<out>_stats.json` for each `_` in
    its name, since both <out> and <key> may hold one."""
    name = prefix.name
    return [prefix.parent / f"{name[:at]}{STATS_SUFFIX}" for at in range(1, len(name)) if name[at] == "_"]


def recorded_largest_token_id(prefix: Path) -> Optional[int]:
    """The largest token id a stats file records for `prefix`, when one does and the dataset is still the one it
    describes; None otherwise (the caller reads the tokens)."""
    for stats_file in stats_files_for(prefix):
        try:
            stats = json.loads(stats_file.read_text(encoding="utf-8"))
            entry = stats["datasets"][prefix.name]
            largest, signature = int(entry["max_token_id"]), str(entry["signature"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            if dataset_signature(prefix) == signature:
                return largest
        except OSError:
            return None
    return None
