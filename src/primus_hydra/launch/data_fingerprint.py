"""Fingerprints of the data files a run reads, for its provenance record: size and mtime of each, and a digest of
the small ones (index files, tokenizer files, text). A multi-GB token file (.bin) is never read for this: its size
and mtime stand for it, so recording costs milliseconds whatever the data set's size."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any, Optional

DIGEST_LIMIT = 64 * 1024 * 1024  # files up to this size are hashed whole (.idx files always)
FILES_NAMED = 20  # a folder: this many of its files named in the record (all of them in its listing digest)


def data_fingerprints(cfg: Any) -> list[dict]:
    """The files module.data names (a text file or folder, a token file, an indexed prefix or blend) and the
    tokenizer folder; one entry each."""
    data = cfg.module.data if "module" in cfg and "data" in cfg.module else None
    if data is None or data.source == "mock":
        return []
    entries = []
    if data.source == "text":
        entries.append(text_source(data.path))
    elif data.source == "tokens" and data.path:
        entries.append(file_fingerprint(Path(str(data.path)).expanduser()))
    elif data.source == "indexed" and data.path:
        for prefix in blend_prefixes(str(data.path)):
            entries += [file_fingerprint(Path(prefix + suffix).expanduser()) for suffix in (".idx", ".bin")]
    if data.get("tokenizer"):
        entries.append(folder_fingerprint(Path(str(data.tokenizer)).expanduser()))
    return entries


def blend_prefixes(path: str) -> list[str]:
    """`prefix` or `w1 prefix1 w2 prefix2 ...` (Megatron's --data-path) as its prefixes."""
    words = path.split()
    return words if len(words) == 1 else words[1::2]


def text_source(path: Optional[str]) -> dict:
    from primus_hydra.backends.common.data_sources import default_text_corpus, text_files

    if not path:  # Python's own sources: named by the interpreter's version, not walked (~0.2 s saved a run)
        return {"path": str(default_text_corpus()), "python_stdlib": sys.version.split()[0]}
    root = Path(str(path)).expanduser()
    if not root.is_dir():
        return file_fingerprint(root)
    return listing_fingerprint(root, text_files(root))


def file_fingerprint(path: Path) -> dict:
    try:
        stat = path.stat()
    except OSError:
        return {"path": str(path), "missing": True}
    entry = {"path": str(path.resolve()), "bytes": stat.st_size, "mtime": stat.st_mtime}
    if path.suffix == ".idx" or (path.suffix != ".bin" and stat.st_size <= DIGEST_LIMIT):
        entry["sha256"] = file_digest(path)
    return entry


def folder_fingerprint(root: Path) -> dict:
    if not root.is_dir():
        return file_fingerprint(root)
    return listing_fingerprint(root, sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts))


def listing_fingerprint(root: Path, paths: list[Path]) -> dict:
    """A folder (text files, a tokenizer): its files' count, bytes, newest mtime, and a digest of the listing of
    (relative path, size, mtime), with the first files named."""
    listing = hashlib.sha256()
    total, newest = 0, 0.0
    for path in paths:
        stat = path.stat()
        listing.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime}\n".encode())
        total, newest = total + stat.st_size, max(newest, stat.st_mtime)
    return {"path": str(root.resolve()), "files": len(paths), "bytes": total, "newest_mtime": newest,
            "listing_sha256": listing.hexdigest(), "first_files": [str(p.relative_to(root)) for p in paths[:FILES_NAMED]]}


def file_digest(path: Path) -> Optional[str]:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()
