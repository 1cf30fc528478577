"""The installed version of a Python distribution, as importlib.metadata.version gives it, read from its .dist-info
folder without importing importlib.metadata (~15-20 ms here: it imports email, zipfile and csv), for what runs
without torch (which imports it): a dry run's translation stamp, the provenance record, task=import's release checks.

The first entry of sys.path that holds the distribution decides, as for importlib.metadata; where that entry holds
it as an .egg-info (or as anything but a plain .dist-info folder with a Version line), importlib.metadata answers.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Iterable, Optional

_SEPARATORS = re.compile(r"[-_.]+")


def installed_version(distribution: str) -> Optional[str]:
    """`distribution`'s version, or None where it is not installed."""
    return installed_versions([distribution])[distribution]


def installed_versions(distributions: Iterable[str]) -> dict[str, Optional[str]]:
    """{distribution: its version, or None} for several, with each sys.path folder listed once."""
    asked = list(distributions)
    left = {_normalized(name): name for name in reversed(asked)}  # a spelling importlib.metadata is asked with
    found: dict[str, Optional[str]] = {}
    for entry in sys.path:
        if not left:
            break
        held = _distributions_in(entry or ".")
        if held is None:  # a missing folder, a zip file: importlib.metadata reads those
            if entry and os.path.isfile(entry):
                found.update((key, _read_by_importlib_metadata(name)) for key, name in left.items())
                left.clear()
            continue
        for key in [key for key in left if key in held]:
            distribution, name = left.pop(key), held[key]
            version = _metadata_version(os.path.join(entry or ".", name)) if name.endswith(".dist-info") else None
            found[key] = version if version is not None else _read_by_importlib_metadata(distribution)
    return {name: found.get(_normalized(name)) for name in asked}


_folders: dict[str, tuple[int, dict[str, str]]] = {}  # folder -> (its modification time, _distributions_in's answer)


def _distributions_in(folder: str) -> Optional[dict[str, str]]:
    """{normalized distribution name: its first .dist-info or .egg-info entry, in listing order} of a sys.path folder;
    None where it cannot be listed. Kept while the folder's modification time stays (installing or removing a
    distribution adds or removes an entry, which changes it): a dry run asks ~5 times, task=import ~1.5 times a file."""
    try:
        modified = os.stat(folder).st_mtime_ns
        kept = _folders.get(folder)
        if kept is not None and kept[0] == modified:
            return kept[1]
        names = os.listdir(folder)
    except OSError:
        return None
    held: dict[str, str] = {}
    for name in names:
        stem, dot, suffix = name.rpartition(".")
        if suffix in ("dist-info", "egg-info") and dot:
            held.setdefault(_normalized(stem.split("-", 1)[0]), name)
    _folders[folder] = (modified, held)
    return held


def _normalized(name: str) -> str:
    return _SEPARATORS.sub("_", name).lower()


def _metadata_version(dist_info: str) -> Optional[str]:
    try:
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8") as metadata:
            for line in metadata:
                if not line.strip():  # the end of the headers
                    return None
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip() or None
    except OSError:
        return None
    return None


def _read_by_importlib_metadata(distribution: str) -> Optional[str]:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
