"""Atomic, sharded, checksummed checkpoints with torch.distributed.checkpoint (DCP).

Saving: every rank writes its shards into `.tmp-step_NNNNNNN`, hashing the bytes as they go out (xxh3_64, or
crc32 without xxhash: checkpoint_paths.py; no second read); rank 0 adds trainer_state.pt and meta.json (every file's size, checksum and writer rank),
renames the folder to `step_NNNNNNN`, then replaces `latest`. A failure on any rank (a full disk) is agreed by
all: the partial folder is removed and every rank raises the same one-line CheckpointError; `latest` is untouched.

Loading: each rank verifies its share of the files (those its rank wrote, in the same layout) against meta.json
before DCP reads anything; the ranks agree on the outcome. `resume=auto` takes the newest step folder that
verifies, whatever `latest` says (a crash between the rename and the `latest` update leaves `latest` one step
behind), warns when that is not simply `latest`, and moves corrupt newer steps aside. Loading goes through the
current layout's state dict, so a checkpoint written at dp=2, fsdp=2 or tp=2 resumes at any other layout (DCP
reshards). Existing checkpoints are never overwritten.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from primus_hydra.backends.common.checkpoint_paths import (
    LATEST,
    META,
    TRAINER_STATE,
    CheckpointFolder,
    FileRecord,
    Hasher,
    file_checksum,
    read_meta,
    records_for_rank,
    step_dir_name,
    verify_files,
)
from primus_hydra.backends.common.distributed import all_gather_objects, broadcast_from_rank_0
from primus_hydra.errors import CheckpointError


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _rank_and_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def _first_failure(failure: Optional[str]) -> Optional[str]:
    """Collective: the failure of the lowest failing rank, the same on every rank (None when all succeeded)."""
    return next((f for f in all_gather_objects(failure) if f), None)


def _no_fault(point: str) -> None:
    pass


class CheckpointManager(CheckpointFolder):
    """Saves, finds and loads the checkpoints of a folder (collectives: every rank calls save, find and load)."""

    # -- saving -----------------------------------------------------------------------------------------
    def save(self, step: int, model: Optional[torch.nn.Module], optimizer: Optional[torch.optim.Optimizer],
             trainer_state: dict, meta: dict[str, Any], fault: Callable[[str], None] = _no_fault,
             write_shards: Optional[Callable[[Path], dict[str, FileRecord]]] = None) -> Path:
        """Collective. `fault(point)` is called where crash tests kill a rank: "save" (this rank's shards written),
        then on rank 0 "before_rename", "after_rename", "before_latest", "after_latest". `write_shards(tmp)`
        replaces DCP for a library with its own sharded format (megatron-core's dist_checkpointing); files it does
        not record are checksummed by rank 0 before the rename."""
        if write_shards is None:
            def write_shards(tmp: Path) -> dict[str, FileRecord]:
                return _write_shards(tmp, model, optimizer)
        final = self.root / step_dir_name(step)
        if final.exists():
            raise CheckpointError(f"checkpoint {final} already exists; refusing to overwrite it")
        tmp = self.root / f".tmp-{final.name}"
        failure = self._failure_line(step, _attempt(lambda: self._start(tmp))) if _is_main() else None
        self._raise_if_failed(_first_failure(failure), tmp)
        records: dict[str, FileRecord] = {}
        failure = self._failure_line(step, _attempt(lambda: records.update(write_shards(tmp))))
        fault("save")
        gathered = all_gather_objects((failure, records))
        self._raise_if_failed(next((f for f, _ in gathered if f), None), tmp)
        failure = None
        if _is_main():
            every_rank = {name: record for _, written in gathered for name, record in written.items()}
            failure = self._finish(step, tmp, final, trainer_state, meta, every_rank, fault)
        self._raise_if_failed(broadcast_from_rank_0(failure), tmp)  # nobody moves on before the checkpoint is complete
        return final

    def _start(self, tmp: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(".tmp-step_*"):  # left by crashed saves: never behind `latest`
            shutil.rmtree(stale)
        tmp.mkdir()

    def _finish(self, step: int, tmp: Path, final: Path, trainer_state: dict, meta: dict[str, Any],
                records: dict[str, FileRecord], fault: Callable[[str], None]) -> Optional[str]:
        """Rank 0: trainer state, meta.json, the rename, `latest`. Returns None, or the line saying what failed."""
        def complete() -> None:
            records[TRAINER_STATE] = _save_trainer_state(trainer_state, tmp / TRAINER_STATE)
            for file in sorted(tmp.iterdir()):  # what was not hashed while written (DCP wrote it some other way)
                known = records.get(file.name)
                if known is None or known.checksum is None:
                    records[file.name] = FileRecord(file.stat().st_size, file_checksum(file), known.rank if known else 0)
            files = {name: record.as_json() for name, record in sorted(records.items())}
            _write_durably(tmp / META, json.dumps({**meta, "step": step, "files": files}, indent=2))
            _fsync_dir(tmp)

        failure = _attempt(complete)
        if failure is None:
            fault("before_rename")
            failure = _attempt(lambda: os.rename(tmp, final))
        if failure is not None:
            return self._failure_line(step, failure)
        fault("after_rename")
        pointer_tmp = self.root / f".{LATEST}.tmp"

        def point_latest() -> None:
            _write_durably(pointer_tmp, final.name + "\n")
            fault("before_latest")
            os.replace(pointer_tmp, self.root / LATEST)
            _fsync_dir(self.root)

        failure = _attempt(point_latest)
        if failure is not None:
            with contextlib.suppress(OSError):
                pointer_tmp.unlink()
            return (f"module.checkpoint.dir={self.root}: {final.name} was saved but `{LATEST}` could not be updated "
                    f"({failure}); module.checkpoint.resume=auto continues from {final.name}")
        fault("after_latest")
        return None

    def _failure_line(self, step: int, cause: Optional[str]) -> Optional[str]:
        if cause is None:
            return None
        previous = self.latest()
        kept = f"`{LATEST}` still names {previous.name}" if previous is not None else "no earlier checkpoint is affected"
        return (f"module.checkpoint.dir={self.root}: saving step {step} failed ({cause}); the partial save was removed "
                f"and {kept}; free space or choose another module.checkpoint.dir, then continue with "
                f"module.checkpoint.resume=auto")

    def _raise_if_failed(self, failure: Optional[str], tmp: Path) -> None:
        """Collective (every rank holds the same `failure`): rank 0 removes the partial save, all raise one line."""
        if failure is None:
            return
        if _is_main():
            shutil.rmtree(tmp, ignore_errors=True)
        _barrier()
        raise CheckpointError(failure)

    # -- finding and loading ----------------------------------------------------------------------------
    def find(self, spec: Optional[str], key: str) -> tuple[Optional[Path], list[str]]:
        """Collective. The checkpoint `spec` names, verified by every rank (each its share of the files), and the
        warnings to log. `auto`: the newest step folder that verifies (None when there is none at all); newer ones
        that fail are moved aside. A named path that fails verification is an error: nothing else is tried."""
        if spec != "auto":
            path = self.resolve(spec, key)  # the same on every rank: it reads meta.json and `latest` only
            if path is not None:
                failure = self._verify_everywhere(path)
                if failure:
                    fallback = " (module.checkpoint.resume=auto falls back to the newest one that verifies)" if (
                        key == "module.checkpoint.resume") else ""
                    raise CheckpointError(f"{key}={spec}: {failure}; restore the file or use another step_* folder{fallback}")
            return path, []
        candidates, note = broadcast_from_rank_0(self.auto_candidates())
        failed: list[tuple[Path, str]] = []
        chosen = None
        for path in candidates:
            failure = self._verify_everywhere(path)
            if failure is None:
                chosen = path
                break
            failed.append((path, failure))
        if chosen is None:
            if failed:
                raise CheckpointError(
                    f"{key}=auto: no step in module.checkpoint.dir={self.root} verifies (the newest, {failed[0][0].name}: "
                    f"{failed[0][1]}); restore it, or resume from a copy you trust with {key}=<step folder>"
                )
            return None, []
        lines = [f"{key}=auto: {note}; resuming from {chosen.name}, the newest step that verifies"] if note else []
        if _is_main():
            for path, failure in failed:
                moved = self.move_aside(path)
                lines.append(f"{key}=auto: {path.name} failed verification ({failure}); moved it to {moved.name} and "
                             f"resuming from {chosen.name}, the newest step that verifies")
        return chosen, broadcast_from_rank_0(lines)

    def _verify_everywhere(self, path: Path) -> Optional[str]:
        """Collective: each rank checks sizes and checksums of its share of the files; the first failure, agreed."""
        rank, world = _rank_and_world()
        try:
            _, records = read_meta(path)
            verify_files(path, records_for_rank(records, rank, world))
            failure = None
        except CheckpointError as error:
            failure = str(error)
        return _first_failure(failure)

    @staticmethod
    def load(path: Path, key: str, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer], model_name: str) -> dict:
        """Load a checkpoint `find` verified into the current layout (collective). optimizer=None loads the weights
        only. Returns the trainer state."""
        dcp, get_state_dict, set_state_dict = _dcp()
        from torch.distributed.checkpoint.api import CheckpointException

        if optimizer is None:
            model_state = get_state_dict(model, [])[0]
            state = {"model": model_state}
        else:
            model_state, optimizer_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optimizer": optimizer_state}
        try:
            with _single_process_quiet():
                dcp.load(state, checkpoint_id=str(path), no_dist=not dist.is_initialized())
        except (Exception, CheckpointException) as error:  # DCP's CheckpointException is a BaseException
            cause = describe_failure(error)
            if "Missing key" in cause or "size mismatch" in cause.lower() or "shape" in cause.lower():
                raise CheckpointError(f"checkpoint {path} does not fit model {model_name}: {cause}") from error
            raise CheckpointError(f"{key}: {path} cannot be loaded ({cause})") from error
        if optimizer is None:
            set_state_dict(model, [], model_state_dict=state["model"], optim_state_dict={})
            return {}
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        try:
            return torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=False)
        except Exception as error:  # noqa: BLE001
            raise CheckpointError(f"{key}: {path / TRAINER_STATE} cannot be loaded ({type(error).__name__}: {error})") from error


# -- writing with checksums -------------------------------------------------------------------------------------
def _write_shards(tmp: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, FileRecord]:
    """This rank's DCP shards (and rank 0's `.metadata`), with the records of the files this rank wrote."""
    dcp, get_state_dict, _ = _dcp()
    from torch.distributed.checkpoint import FileSystemWriter

    model_state, optimizer_state = get_state_dict(model, optimizer)
    writer = FileSystemWriter(str(tmp))
    hashing = writer.fs = _hashing_file_system()
    with _single_process_quiet():
        dcp.save({"model": model_state, "optimizer": optimizer_state}, storage_writer=writer,
                 no_dist=not dist.is_initialized())
    rank = _rank_and_world()[0]
    return {name: FileRecord(size, checksum, rank) for name, (size, checksum) in hashing.written.items()}


def _save_trainer_state(trainer_state: dict, path: Path) -> FileRecord:
    with open(path, "wb") as raw:
        out = _HashingWriter(raw)
        torch.save(trainer_state, out)
        raw.flush()
        os.fsync(raw.fileno())
    return FileRecord(out.size, out.checksum(), 0)


def _dcp():
    """torch.distributed.checkpoint takes ~0.4 s to import: only when a checkpoint is written or read."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    return dcp, get_state_dict, set_state_dict


class _HashingWriter:
    """A file being written, with the checksum of every byte that goes through write(). Anything else that could
    change the bytes behind its back (a seek) marks it, and its checksum is then read back instead."""

    def __init__(self, raw):
        self.raw, self.hasher, self.size, self.bypassed = raw, Hasher(), 0, False

    def write(self, data) -> int:
        count = self.raw.write(data)
        try:
            view = memoryview(data).cast("B")
        except (TypeError, ValueError):
            self.bypassed = True
            return count
        count = len(view) if count is None else count
        self.hasher.update(view[:count])
        self.size += count
        return count

    def checksum(self) -> Optional[str]:
        return None if self.bypassed else self.hasher.result()

    def seek(self, *args):
        self.bypassed = True
        return self.raw.seek(*args)

    def tell(self) -> int:
        return self.raw.tell()

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        self.raw.close()

    @property
    def closed(self) -> bool:
        return self.raw.closed

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str):  # anything not above may write without us: read back instead
        self.bypassed = True
        return getattr(self.raw, name)


def _hashing_file_system():
    """DCP's file system with checksums (a class made on first use: DCP is imported only when needed)."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    class HashingFileSystem(FileSystem):
        """DCP's local file system, recording (size, checksum) of each file this process writes, by file name."""

        def __init__(self):
            super().__init__()
            self.written: dict[str, tuple[int, Optional[str]]] = {}

        @contextlib.contextmanager
        def create_stream(self, path, mode):
            with super().create_stream(path, mode) as stream:
                if "w" not in mode:
                    yield stream
                    return
                out = _HashingWriter(stream)
                yield out
            size = os.stat(path).st_size  # a byte not seen by write() leaves the checksum to be read back
            self.written[Path(path).name] = (size, out.checksum() if out.size == size else None)

        def rename(self, path, new_path) -> None:  # `.metadata.tmp` -> `.metadata`
            super().rename(path, new_path)
            if Path(path).name in self.written:
                self.written[Path(new_path).name] = self.written.pop(Path(path).name)

    return HashingFileSystem()


# -- failures ---------------------------------------------------------------------------------------------------
def _attempt(action: Callable[[], Any]) -> Optional[str]:
    """Run a save's file operation; what failed, in words, or None."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        action()
    except (OSError, RuntimeError, CheckpointException) as error:  # RuntimeError: torch's writer over an OSError
        return describe_failure(error)
    return None


def describe_failure(error: BaseException) -> str:
    """The cause of a failed file operation in one line: an OSError's text (ENOSPC: `No space left on device`)
    wherever it sits (DCP wraps each rank's exception, torch's writer raises a RuntimeError over it)."""
    from torch.distributed.checkpoint.api import CheckpointException

    if isinstance(error, CheckpointException) and error.failures:
        return describe_failure(next(iter(error.failures.values()))[0])
    seen, current = set(), error
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.strerror:
            where = f": {current.filename}" if current.filename else ""
            return f"{current.strerror}{where}"
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _write_durably(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())


@contextlib.contextmanager
def _single_process_quiet():
    """DCP warns that it assumes a single process when no process group exists: that is exactly our intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
