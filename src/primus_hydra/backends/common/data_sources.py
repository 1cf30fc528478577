"""The project's data sources as files on disk, read without torch: which text files module.data.source=text reads,
and what each source (text, tokens, indexed) and module.data.tokenizer must hold before a run starts. One rule for every backend that reads
them (torch, megatron's core trainer, torchtitan): their adapters call data_source_failures and
data_source_warnings when the job is prepared, and the trainers read the files through the same listing.
"""
from __future__ import annotations

import codecs
import os
import sysconfig
from pathlib import Path
from typing import Any, Optional

SFT_TEXT_SUFFIX, SFT_MASK_SUFFIX = "_text_document", "_loss_mask_document"  # task=prepare_data task.format=chat's
_SKIPPED_FOLDERS = {"site-packages", "__pycache__"}
TEXT_SUFFIXES = {".py", ".txt", ".md", ".rst", ".json", ".yaml", ".yml", ".c", ".h", ".cfg", ".toml"}
DEFAULT_TEXT_LIMIT_BYTES = 4 * 1024 * 1024  # ~4M byte tokens: far more than the default run reads; loads in a fraction of a second
TEXT_PROBE_BYTES = 8192  # how much of each file is looked at to tell text from binary (git's rule reads as much)


def default_text_corpus() -> Path:
    """The Python standard library's own sources: present on every machine that runs us, no download."""
    return Path(sysconfig.get_paths()["stdlib"])


def text_files(root: Path) -> list[Path]:
    """The text files under root, in path order; installed packages (site-packages) and bytecode caches are not
    walked at all (walking, then filtering them, took 0.7 s of every default run's start)."""
    if root.is_file():
        return [root]
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in _SKIPPED_FOLDERS]
        found += [Path(folder, name) for name in files if os.path.splitext(name)[1] in TEXT_SUFFIXES]
    return sorted(path for path in found if path.is_file())


def files_read(root: Path, limit_bytes: int = DEFAULT_TEXT_LIMIT_BYTES) -> list[tuple[Path, int]]:
    """(file, bytes read from it) for the files a run reads, in order, until limit_bytes in all; empty files left out."""
    read, total = [], 0
    for file in text_files(root):
        count = min(file.stat().st_size, limit_bytes - total)
        if count > 0:
            read.append((file, count))
            total += count
        if total >= limit_bytes:
            break
    return read


def no_text_line(root: Path) -> str:
    """Why a text source yields no bytes: an empty file, or a folder without a non-empty text file."""
    if root.is_file():
        return f"module.data.path={root}: the file is empty (module.data.source=text trains on the bytes of text files)"
    return (f"module.data.path={root}: no text found (looked for non-empty {', '.join(sorted(TEXT_SUFFIXES))} files "
            f"in the folder)")


def text_source_failure(path: Any, seq_length: int, limit_bytes: int = DEFAULT_TEXT_LIMIT_BYTES) -> Optional[str]:
    """One line when the text under `path` cannot feed sequences of seq_length + 1 byte tokens; None when it can."""
    root = Path(str(path)).expanduser()
    count = sum(size for _, size in files_read(root, limit_bytes))
    if count == 0:
        return no_text_line(root)
    if count <= seq_length + 1:
        return (f"module.data.path={root}: {count} byte tokens is too short for module.seq_length={seq_length} "
                f"(needs more than {seq_length + 1})")
    return None


def looks_binary(file: Path) -> bool:
    """A NUL byte or bytes that are not UTF-8 in the first TEXT_PROBE_BYTES (a character cut at the end counts)."""
    with open(file, "rb") as handle:
        head = handle.read(TEXT_PROBE_BYTES)
    if b"\0" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return False


def binary_text_warning(path: Any, limit_bytes: int = DEFAULT_TEXT_LIMIT_BYTES) -> Optional[str]:
    """One line naming the files among those a run reads that are not text (it trains on their bytes all the same)."""
    root = Path(str(path)).expanduser()
    read = [file for file, _ in files_read(root, limit_bytes)]
    binary = [file for file in read if looks_binary(file)]
    if not binary:
        return None
    which = "the file is" if root.is_file() else f"{len(binary)} of the {len(read)} files read are (the first: {binary[0]})"
    return (f"module.data.path={root}: {which} not UTF-8 text (a NUL byte or invalid UTF-8 in the first "
            f"{TEXT_PROBE_BYTES} bytes); module.data.source=text trains on the raw bytes all the same")


def data_source_failures(cfg: Any, blends: bool) -> list[str]:
    """What keeps the job's data source from feeding its sequences, one line each (blends: whether a weighted blend
    of indexed datasets is read). A path that does not exist is the orchestrator's line (input_path_failures)."""
    data, module = cfg.module.data, cfg.module
    source = str(data.source)
    if data.get("tokenizer"):
        failures = tokenizer_failures(data.tokenizer, source, cfg.model.vocab_size)
        if failures:
            return failures
    if data.get("packing") and source != "sft":
        return [f"module.data.packing=true: packs the conversations of module.data.source=sft (source={source} already "
                f"reads its tokens back to back); unset module.data.packing"]
    if source == "sft":
        if not data.path:
            return ["module.data.path is required with module.data.source=sft (the task.out prefix of task=prepare_data "
                    "task.format=chat|instruction|alpaca|squad)"]
        return sft_data_failures(str(data.path), cfg.model.vocab_size, module.seq_length)
    if not data.path:
        return []
    if source == "indexed":
        from primus_hydra.backends.common.indexed_file import indexed_data_failures  # numpy: only for indexed data

        return indexed_data_failures(data.path, cfg.model.vocab_size, module.seq_length, blends=blends)
    if not Path(str(data.path)).expanduser().exists():
        return []
    failure = None
    if source == "text":
        failure = text_source_failure(data.path, module.seq_length)
    elif source == "tokens":
        from primus_hydra.backends.common.token_file import token_file_failure  # numpy: only for a token file

        failure = token_file_failure(data.path, str(data.token_dtype), cfg.model.vocab_size, module.seq_length)
    return [failure] if failure else []


def sft_data_failures(path: str, vocab_size: int, seq_length: int) -> list[str]:
    """module.data.source=sft: <path>_text_document fits the model, and <path>_loss_mask_document is its mask (the
    same document lengths)."""
    import numpy as np

    from primus_hydra.backends.common.indexed_file import (
        IndexedFileError,
        document_token_offsets,
        indexed_data_failures,
        read_index,
    )

    text_prefix, mask_prefix = f"{path}{SFT_TEXT_SUFFIX}", f"{path}{SFT_MASK_SUFFIX}"
    for prefix in (text_prefix, mask_prefix):
        missing = [name for name in (f"{prefix}.bin", f"{prefix}.idx") if not Path(name).expanduser().is_file()]
        if missing:
            return [f"module.data.path={path}: no {missing[0]} (module.data.source=sft reads <path>{SFT_TEXT_SUFFIX} "
                    f"and its loss mask <path>{SFT_MASK_SUFFIX}, as task=prepare_data task.format=chat|instruction|alpaca|squad "
                    f"task.out=<path> writes them)"]
    failures = indexed_data_failures(text_prefix, vocab_size, seq_length, blends=False)
    if failures:
        return failures[:1]
    try:
        mask = read_index(mask_prefix)
    except IndexedFileError as error:
        return [str(error)]
    if mask.dtype != np.uint8 or not np.array_equal(document_token_offsets(mask), document_token_offsets(read_index(text_prefix))):
        return [f"module.data.path={path}: {mask_prefix}.bin is not a uint8 loss mask of the same document lengths "
                f"as {text_prefix}.bin (written by another run?); rerun task=prepare_data"]
    return []


def tokenizer_failures(tokenizer: Any, source: str, vocab_size: int) -> list[str]:
    """module.data.tokenizer's line: it tokenizes text only, and its folder must fit the model (text_tokenizer.py)."""
    if source != "text":
        return [f"module.data.tokenizer={tokenizer}: a tokenizer applies only to module.data.source=text (source="
                f"{source} is token ids already); unset module.data.tokenizer"]
    from primus_hydra.backends.common.text_tokenizer import tokenizer_key_failures  # JSON only: no tokenizers import

    return tokenizer_key_failures(tokenizer, vocab_size)


def sft_truncation_warning(path: str, seq_length: int) -> Optional[str]:
    """One line when conversations are longer than a training sequence (seq_length + 1 tokens with the shifted target):
    their tails are cut, and those whose learned tokens all lie past the cut teach nothing. From the index's lengths
    and the masks of the long ones only: milliseconds on a large set."""
    import numpy as np

    from primus_hydra.backends.common.indexed_file import IndexedFileError, document_token_offsets, read_index

    try:
        text, mask = read_index(f"{path}{SFT_TEXT_SUFFIX}"), read_index(f"{path}{SFT_MASK_SUFFIX}")
    except (IndexedFileError, OSError):
        return None  # the failures say what is wrong with the files
    offsets = document_token_offsets(text)
    lengths = offsets[1:] - offsets[:-1]
    window = seq_length + 1
    long = np.flatnonzero(lengths > window)
    if not len(long):
        return None
    masks = mask.tokens()
    lost = sum(1 for document in long if not masks[offsets[document]: offsets[document] + window].any())
    return (f"module.data.path={path}: {len(long):,} of {len(lengths):,} conversations are longer than a sequence "
            f"(module.seq_length={seq_length}; the longest has {int(lengths.max()):,} tokens) and are cut there"
            + (f", {lost:,} of them before any learned token (they teach nothing)" if lost else "")
            + "; raise module.seq_length to keep them whole")


def packing_warning(cfg: Any) -> Optional[str]:
    """One line where packed conversations (module.data.packing) attend across their boundaries: backend=megatron,
    and backend=torch's pipeline stages; None where attention stays within each (backend=torch otherwise)."""
    backend, pp = str(cfg.backend.name), int(cfg.module.parallel.pp)
    if backend == "megatron":
        why = ("backend=megatron: megatron-core's packed-sequence attention needs Transformer Engine or flash-attention "
               "kernels, absent on CPU")
    elif backend == "torchtitan":
        why = "backend=torchtitan: its batches carry no document boundaries to its attention"
    elif backend == "torch" and pp > 1:
        why = f"backend=torch with module.parallel.pp={pp}: the pipeline stages take no document mask; pp=1 masks it"
    else:
        return None
    return (f"module.data.packing=true: attention crosses conversation boundaries ({why}): a packed conversation "
            f"attends to those before it in its sequence")


def data_source_warnings(cfg: Any) -> list[str]:
    """What the job's data source will train on that it likely should not: conversations cut at the sequence length,
    packed conversations that attend to each other, text files that are binary."""
    data = cfg.module.data
    if str(data.source) == "sft":
        warnings = [sft_truncation_warning(str(data.path), int(cfg.module.seq_length)),
                    packing_warning(cfg) if data.get("packing") else None]
        return [warning for warning in warnings if warning]
    if str(data.source) != "text" or not data.path or not Path(str(data.path)).expanduser().exists():
        return []
    warning = binary_text_warning(data.path)
    return [warning] if warning else []
