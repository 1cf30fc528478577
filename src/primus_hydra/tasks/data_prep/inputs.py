"""The files task.input names and their records, streamed in order.

task.input is a file, a folder (walked in sorted order; names starting with `.` skipped) or a glob. Each file has a
format: from task.format, or (auto) from its name once a `.gz` / `.zst` ending is set aside: `.jsonl`, `.json`,
`.ndjson` are JSONL, `.parquet` Parquet, `.arrow` an Arrow stream (what `datasets.save_to_disk` writes; such a
folder is read in the order its state.json lists), anything else plain text, one document per file.

Records come in chunks of one file each (a few hundred records or about a MiB), the unit a worker tokenizes: a
JSONL chunk holds the raw lines (the worker parses them, so parsing scales with the workers), a text chunk the
file's bytes, a Parquet or Arrow chunk the chosen columns' values.
"""
from __future__ import annotations

import glob
import gzip
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Optional

COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}
DATASET_FOLDER_FILES = ("state.json", "dataset_info.json")  # what datasets.save_to_disk writes beside its .arrow
CHUNK_RECORDS = 512
CHUNK_BYTES = 1 << 20
TEXT, JSONL, PARQUET, ARROW = "text", "jsonl", "parquet", "arrow"


@dataclass(frozen=True)
class InputFile:
    path: Path
    format: str  # TEXT, JSONL, PARQUET or ARROW
    size: int
    mtime_ns: int

    @property
    def compression(self) -> Optional[str]:
        return COMPRESSED_SUFFIXES.get(self.path.suffix.lower())


@dataclass
class Chunk:
    """Records of one file: (line number or record index, payload) pairs."""

    file: int  # its index among the input files
    format: str
    records: list = field(default_factory=list)
    payload_bytes: int = 0


class InputError(ValueError):
    """A one-line reason the input cannot be read, naming task.input or the file."""


def name_format(path: Path) -> str:
    """The format auto detection gives a file, from its name."""
    name = path.name.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    suffix = os.path.splitext(name)[1]
    if suffix in JSONL_SUFFIXES:
        return JSONL
    return {".parquet": PARQUET, ".arrow": ARROW}.get(suffix, TEXT)


def file_format(path: Path, chosen: str) -> str:
    """The file's format under task.format=chosen (InputError: a file task.format=parquet cannot read)."""
    detected = name_format(path)
    if chosen == "auto":
        return detected
    if chosen == PARQUET:
        if detected not in (PARQUET, ARROW):
            raise InputError(f"task.format=parquet: {path} is neither a .parquet nor an .arrow file")
        return detected
    return chosen


def is_dataset_folder(folder: Path) -> bool:
    return all((folder / name).is_file() for name in DATASET_FOLDER_FILES)


def dataset_folder_files(folder: Path) -> list[Path]:
    """The .arrow files of a datasets.save_to_disk folder, in the order its state.json lists them."""
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        return [folder / entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{folder}: a datasets.save_to_disk folder whose state.json lists no data files ({error})") \
            from None


def _walk(folder: Path) -> list[Path]:
    if is_dataset_folder(folder):
        return dataset_folder_files(folder)
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            found += _walk(entry)
        elif entry.is_file():
            found.append(entry)
    return found


def input_paths(spec: str) -> list[Path]:
    """The files task.input names, in the order they are read (InputError: it names none)."""
    text = os.path.expanduser(str(spec))
    if glob.has_magic(text):
        matches = [Path(match) for match in sorted(glob.glob(text, recursive=True))]
        files = [p for match in matches for p in (_walk(match) if match.is_dir() else [match]) if p.is_file()]
        if not files:
            raise InputError(f"task.input={spec}: the pattern matches no file")
        return files
    root = Path(text)
    if root.is_dir():
        files = _walk(root)
        if not files:
            raise InputError(f"task.input={spec}: the folder holds no file (names starting with '.' are skipped)")
        return files
    if not root.exists():
        raise InputError(f"task.input={spec}: no such file or folder (give a file, a folder or a glob)")
    return [root]


def input_files(spec: str, chosen_format: str) -> list[InputFile]:
    """Each file of task.input with its format, size and modification time (InputError: one line)."""
    files = []
    for path in input_paths(spec):
        try:
            info = path.stat()
        except OSError as error:
            raise InputError(f"task.input={spec}: {path} cannot be read ({error.strerror})") from None
        files.append(InputFile(path.absolute(), file_format(path, chosen_format), info.st_size, info.st_mtime_ns))
    if sum(file.size for file in files) == 0:
        raise InputError(f"task.input={spec}: {'the file is' if len(files) == 1 else 'every file is'} empty")
    return files


class CountingReader(io.RawIOBase):
    """A file read through, counting the bytes taken from disk (compressed ones, for the progress bar)."""

    def __init__(self, handle: IO[bytes]):
        self.handle, self.consumed = handle, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.handle.readinto(buffer)
        self.consumed += count or 0
        return count

    def close(self) -> None:
        self.handle.close()
        super().close()


def open_decompressed(file: InputFile, counter: Optional[CountingReader] = None) -> IO[bytes]:
    """The file's bytes, decompressed when it ends in .gz or .zst (reading through `counter` when given)."""
    raw = counter if counter is not None else open(file.path, "rb")
    if file.compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if file.compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raise InputError(f"{file.path}: reading .zst files needs the zstandard library "
                             f"(pip install 'primus-hydra[data]')") from None
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))
    return io.BufferedReader(raw) if counter is not None else raw


def first_json_record(file: InputFile) -> tuple[int, Any]:
    """(line number, parsed JSON) of the file's first line that is not blank (InputError: none, or not JSON)."""
    with open_decompressed(file) as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    return number, json.loads(line)
                except ValueError as error:
                    raise InputError(f"{file.path}:{number}: not a JSON record ({error})") from None
    raise InputError(f"{file.path}: no JSON record (every line is blank)")


def column_names(file: InputFile) -> list[str]:
    """The columns of a Parquet file or an Arrow stream, read from its schema alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if file.format == PARQUET:
            return list(pq.read_schema(file.path).names)
        with pa.memory_map(str(file.path)) as source:
            return list(pa.ipc.open_stream(source).schema.names)
    except (pa.ArrowException, OSError) as error:
        raise InputError(f"{file.path}: not a {file.format} file pyarrow reads ({error})") from None


def _text_chunks(index: int, handle: IO[bytes]) -> Iterator[Chunk]:
    data = handle.read()
    yield Chunk(index, TEXT, [(0, data)], len(data))


def _jsonl_chunks(index: int, handle: IO[bytes]) -> Iterator[Chunk]:
    chunk = Chunk(index, JSONL)
    for number, line in enumerate(handle, start=1):
        chunk.records.append((number, line))
        chunk.payload_bytes += len(line)
        if len(chunk.records) >= CHUNK_RECORDS or chunk.payload_bytes >= CHUNK_BYTES:
            yield chunk
            chunk = Chunk(index, JSONL)
    if chunk.records:
        yield chunk


def _table_chunks(index: int, file: InputFile, keys: list[str]) -> Iterator[Chunk]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if file.format == PARQUET:
        batches = pq.ParquetFile(file.path).iter_batches(batch_size=CHUNK_RECORDS, columns=keys)
    else:
        batches = (batch.select(keys) for batch in pa.ipc.open_stream(pa.memory_map(str(file.path))))
    row = 0
    for batch in batches:
        for start in range(0, batch.num_rows, CHUNK_RECORDS):
            part = batch.slice(start, CHUNK_RECORDS)
            columns = [part.column(key).to_pylist() for key in keys]
            records = [(row + at, dict(zip(keys, values))) for at, values in enumerate(zip(*columns))]
            row += len(records)
            yield Chunk(index, file.format, records, part.nbytes)


class RecordStream:
    """The chunks of every input file in order; `disk_bytes` says how much of the input has been read so far."""

    def __init__(self, files: list[InputFile], keys: list[str]):
        self.files, self.keys = files, keys
        self.finished_bytes = 0
        self._counter: Optional[CountingReader] = None

    @property
    def disk_bytes(self) -> int:
        return self.finished_bytes + (self._counter.consumed if self._counter is not None else 0)

    def chunks(self) -> Iterator[Chunk]:
        for index, file in enumerate(self.files):
            if file.format in (PARQUET, ARROW):
                yield from _table_chunks(index, file, self.keys)
            else:
                self._counter = CountingReader(open(file.path, "rb"))
                with open_decompressed(file, self._counter) as handle:
                    yield from (_text_chunks if file.format == TEXT else _jsonl_chunks)(index, handle)
                self._counter = None
            self.finished_bytes += file.size
