"""The layout of a checkpoints folder, read without torch (the orchestrator checks resume/load paths with it, the
trainer verifies a step with it before loading): `step_NNNNNNN/` folders, each complete once its meta.json exists,
and the `latest` pointer (see checkpoint.py). meta.json records the size and checksum of every file of its step, so
a truncated, overwritten or bit-flipped file is found, and named, before anything is loaded from it."""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import zlib
from pathlib import Path
from typing import Any, Optional

from primus_hydra.errors import CheckpointError
from primus_hydra.util.records import record

LATEST = "latest"
META = "meta.json"
TRAINER_STATE = "trainer_state.pt"
CORRUPT_SUFFIX = ".corrupt"  # a step that failed verification, moved aside by resume=auto (never deleted)
STEP_NAME = re.compile(r"step_(\d{7,})")
_CHUNK = 8 << 20
_POINTER_LIMIT = 256  # `latest` holds one short name: reading more than this says it is not a pointer


def step_dir_name(step: int) -> str:
    return f"step_{step:07d}"


def step_of(name: str) -> Optional[int]:
    """The step a folder name stands for (`step_0000050` -> 50), or None for any other name."""
    match = STEP_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


class _Crc32:
    """zlib's CRC-32 behind the interface of xxhash's hashers (update, hexdigest)."""

    def __init__(self):
        self.value = 0

    def update(self, data) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def _xxh3_64():
    import xxhash

    return xxhash.xxh3_64()


# name -> (a new hasher, the length of its hex digest). A checksum is written "<name>:<hex>", so every file says how
# it is checked. xxh3_64 hashes at ~31 GB/s here, crc32 at ~7.4 (scripts/bench/bench_checkpoint_checksum.py).
ALGORITHMS = {"xxh3_64": (_xxh3_64, 16), "crc32": (_Crc32, 8)}
CHECKSUM_PATTERN = re.compile("|".join(f"{name}:[0-9a-f]{{{digits}}}" for name, (_, digits) in ALGORITHMS.items()))


@functools.lru_cache(maxsize=None)
def algorithm_available(name: str) -> bool:
    return name != "xxh3_64" or importlib.util.find_spec("xxhash") is not None


def default_algorithm() -> str:
    """xxh3_64 (the xxhash package, part of the torch extra), or zlib's crc32 where it is not installed."""
    return "xxh3_64" if algorithm_available("xxh3_64") else "crc32"


class Hasher:
    """A checksum computed chunk by chunk: update(bytes-like), then result() -> "<algorithm>:<hex>"."""

    def __init__(self, algorithm: Optional[str] = None):
        self.algorithm = algorithm or default_algorithm()
        self._hasher = ALGORITHMS[self.algorithm][0]()

    def update(self, data) -> None:
        self._hasher.update(data)

    def result(self) -> str:
        return f"{self.algorithm}:{self._hasher.hexdigest()}"


def file_checksum(path: Path, algorithm: Optional[str] = None) -> str:
    """A file's checksum, read in chunks into one buffer."""
    hasher, buffer = Hasher(algorithm), bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        while True:
            count = file.readinto(buffer)
            if not count:
                return hasher.result()
            hasher.update(view[:count])


@record(frozen=True)
class FileRecord:
    """One file of a step as meta.json records it: its size, its checksum (None in checkpoints written before
    checksums were recorded: sizes only) and the rank that wrote it (which rank verifies it at load)."""

    size: int
    checksum: Optional[str] = None
    rank: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"size": self.size, "checksum": self.checksum, "rank": self.rank}


def read_meta(path: Path) -> tuple[dict[str, Any], dict[str, FileRecord]]:
    """A step's meta.json and its file records; CheckpointError (naming the file) for anything else."""
    meta_path = path / META
    try:
        meta = json.loads(meta_path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{meta_path} is missing (an incomplete checkpoint)") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{meta_path} is unreadable or corrupt ({type(error).__name__}: {error})") from error
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, dict) or TRAINER_STATE not in files or not isinstance(meta.get("step"), int):
        raise CheckpointError(f"{meta_path} is corrupt: not a checkpoint's meta.json (an object with an integer `step` "
                              f"and `files` listing {TRAINER_STATE})")
    records = {}
    for name, entry in files.items():
        file_record = _file_record(entry)
        if file_record is None or name != Path(name).name or name in ("", ".", ".."):
            raise CheckpointError(f"{meta_path} is corrupt: its entry for file {name!r} is {entry!r} "
                                  f"(a plain file name with size, checksum and rank)")
        records[name] = file_record
    return meta, records


def _file_record(entry: Any) -> Optional[FileRecord]:
    if isinstance(entry, int) and not isinstance(entry, bool):  # sizes only: checkpoints without checksums
        return FileRecord(entry)
    if not isinstance(entry, dict):
        return None
    size, checksum, rank = entry.get("size"), entry.get("checksum"), entry.get("rank", 0)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (size, rank)):
        return None
    if checksum is not None and not (isinstance(checksum, str) and CHECKSUM_PATTERN.fullmatch(checksum)):
        return None
    return FileRecord(size, checksum, rank)


def verify_files(path: Path, records: dict[str, FileRecord]) -> None:
    """Every file present with its recorded size and checksum (where one is recorded); CheckpointError naming the
    first file that is not."""
    for name, expected in records.items():
        file = path / name
        try:
            size = file.stat().st_size if file.is_file() else None
        except OSError:
            size = None
        if size is None:
            raise CheckpointError(f"{file} is missing (incomplete checkpoint)")
        if size != expected.size:
            raise CheckpointError(f"{file} has {size} bytes, expected {expected.size} (truncated or corrupt)")
        if expected.checksum is not None:
            algorithm = expected.checksum.split(":")[0]
            if not algorithm_available(algorithm):
                raise CheckpointError(f"{file} is checked with {algorithm}, which needs the xxhash package: "
                                      f"pip install xxhash (it is part of primus-hydra[torch])")
            try:
                actual = file_checksum(file, algorithm)
            except OSError as error:
                raise CheckpointError(f"{file} cannot be read ({error.strerror or error})") from error
            if actual != expected.checksum:
                raise CheckpointError(f"{file} is corrupt: its checksum is {actual}, meta.json recorded {expected.checksum}")


def records_for_rank(records: dict[str, FileRecord], rank: int, world_size: int) -> dict[str, FileRecord]:
    """The files one rank verifies at load: those written by the ranks it stands for (rank r of the writing job
    -> r % world_size), so each file is read once and, in the same layout, by the rank that wrote it."""
    return {name: entry for name, entry in records.items() if entry.rank % world_size == rank}


@record(frozen=True)
class Pointer:
    """What `latest` says: the step folder it names (a sibling `step_NNNNNNN`), or why it names none."""

    target: Optional[Path]
    problem: Optional[str]


class CheckpointFolder:
    """A checkpoints folder: its steps, `latest`, and the checkpoint paths a user names."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def step_dirs(self) -> list[Path]:
        """Every `step_NNNNNNN` folder, oldest first, complete or not."""
        if not self.root.is_dir():
            return []
        found = [(step_of(p.name), p) for p in self.root.iterdir()]
        return [p for step, p in sorted((s, p) for s, p in found if s is not None) if p.is_dir()]

    def steps(self) -> list[int]:
        """The complete steps (their meta.json written), oldest first."""
        return [step_of(p.name) for p in self.step_dirs() if (p / META).is_file()]

    def pointer(self) -> Pointer:
        """`latest` read strictly: UTF-8 text naming a step folder beside it that holds a meta.json."""
        file = self.root / LATEST
        try:
            with open(file, "rb") as handle:
                raw = handle.read(_POINTER_LIMIT + 1)
        except FileNotFoundError:
            return Pointer(None, "`latest` is missing")
        except OSError as error:
            return Pointer(None, f"`latest` cannot be read ({error.strerror or error})")
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            return Pointer(None, "`latest` is not UTF-8 text")
        if not text:
            return Pointer(None, "`latest` is empty")
        if len(raw) > _POINTER_LIMIT or step_of(text) is None:
            shown = text[:40] + ("..." if len(text) > 40 else "")
            return Pointer(None, f"`latest` holds {shown!r}, not the name of a step folder beside it (step_NNNNNNN)")
        target = self.root / text
        if not (target / META).is_file():
            return Pointer(None, f"`latest` names {text}, which is missing or incomplete (no {META})")
        return Pointer(target, None)

    def latest(self) -> Optional[Path]:
        return self.pointer().target

    def newest_with_meta(self) -> Optional[tuple[Path, dict[str, Any]]]:
        """The newest step folder whose meta.json reads, and its meta: where resume=auto starts looking (it verifies
        the step's files before loading, see checkpoint.py); None when there is none."""
        for path in reversed(self.step_dirs()):
            try:
                return path, read_meta(path)[0]
            except CheckpointError:
                continue
        return None

    def unresumed_failure(self, resume: Optional[str]) -> Optional[str]:
        """A fresh start (resume=None) into a folder that already holds checkpoints would overwrite them."""
        existing = self.step_dirs()
        if resume is not None or not existing:
            return None
        return (f"module.checkpoint.dir={self.root} already holds checkpoints (step {step_of(existing[-1].name)}); "
                f"set module.checkpoint.resume=auto to continue from them, or choose another dir")

    def resolve(self, spec: Optional[str], key: str) -> Optional[Path]:
        """The checkpoint a user named (found, not verified). `auto` is the caller's (it verifies candidates in
        turn); here it gives `latest` or None. A path: a step folder, or a checkpoints root and its `latest`."""
        if spec is None:
            return None
        if spec == "auto":
            return self.latest()
        path = Path(spec).expanduser()
        if (path / META).is_file():
            return path
        if not path.exists():
            raise CheckpointError(f"{key}={spec}: no such checkpoint (give a step_* folder, a checkpoints folder, or auto)")
        folder = CheckpointFolder(path)
        pointer = folder.pointer()
        if pointer.target is not None:
            return pointer.target
        steps = folder.step_dirs()
        if (path / LATEST).exists() or steps:
            newest = f" (newest: {steps[-1].name})" if steps else ""
            raise CheckpointError(f"{key}={spec}: {pointer.problem}; give one of its step_* folders{newest}, or resume "
                                  f"with module.checkpoint.dir={spec} module.checkpoint.resume=auto")
        raise CheckpointError(f"{key}={spec}: not a checkpoint (no {META} and no `{LATEST}` inside)")

    def auto_candidates(self) -> tuple[list[Path], Optional[str]]:
        """resume=auto's candidates, newest first (every step folder: the newest that verifies wins), and why
        `latest` is not simply the answer (None when it names the newest step folder)."""
        candidates = self.step_dirs()[::-1]
        if not candidates:
            return [], None
        pointer = self.pointer()
        if pointer.target is None:
            return candidates, pointer.problem
        if pointer.target.name != candidates[0].name:
            return candidates, (f"`latest` names {pointer.target.name}, but {candidates[0].name} is newer (a save was "
                                f"interrupted before it updated `latest`)")
        return candidates, None

    def move_aside(self, step_path: Path) -> Path:
        """A step that failed verification gets out of the way of the steps a resumed run saves again; it is kept
        (renamed to step_NNNNNNN.corrupt, .corrupt.1, ...) for the user to inspect or delete."""
        target, count = step_path.with_name(step_path.name + CORRUPT_SUFFIX), 0
        while target.exists():
            count += 1
            target = step_path.with_name(f"{step_path.name}{CORRUPT_SUFFIX}.{count}")
        step_path.rename(target)
        return target


MEGATRON_LATEST = "latest_checkpointed_iteration.txt"


def megatron_iteration_folder(path: Path) -> Optional[Path]:
    """A checkpoint in Megatron's own layout, as Megatron-LM's and Megatron-Bridge's `save` write it (torch_dist
    shards, no meta.json): an iter_XXXXXXX folder itself, or the save folder, whose latest_checkpointed_iteration.txt
    names its newest one. None for anything else."""
    path = Path(path).expanduser()
    if not path.is_dir() or (path / "meta.json").exists():
        return None
    if (path / ".metadata").is_file() and (path / "common.pt").is_file():
        return path
    latest = path / MEGATRON_LATEST
    if latest.is_file():
        text = latest.read_text(encoding="utf-8", errors="replace").strip()
        if text.isdigit():
            folder = path / f"iter_{int(text):07d}"
            return folder if (folder / ".metadata").is_file() else None
    return None
