"""A Hugging Face tokenizer folder (tokenizer.json, optionally tokenizer_config.json / special_tokens_map.json) as
the project reads it: module.data.tokenizer tokenizes text data for every backend that trains, and task=generate
encodes and decodes prompts with the same loader.

Checked before a run from the JSON alone (no `tokenizers`, numpy or torch import): the folder, the file, and that
no token id reaches past model.vocab_size. The `tokenizers` library (Rust, parallel) is imported only where text
is tokenized, in the workers.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Optional

from primus_hydra.errors import DataError

log = logging.getLogger("primus_hydra.data")

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json", "special_tokens_map.json")  # those a folder may hold
MODEL_TYPES = ("BPE", "Unigram", "WordLevel", "WordPiece")  # tokenizer.json's model.type the library reads
PROGRESS_EVERY_S = 5.0  # a log line this often while text is tokenized
CHUNK_BYTES = 1 << 20  # text handed to the library at a time (it tokenizes a chunk's documents in parallel)


def tokenizer_key_failures(folder: Any, vocab_size: int, key: str = "module.data.tokenizer") -> list[str]:
    """Why the tokenizer folder cannot tokenize for a model of vocab_size ids, one line; empty when it can."""
    root = Path(str(folder)).expanduser()
    named = f"{key}={folder}"
    if not root.is_dir():
        return [f"{named}: no such folder (give a Hugging Face tokenizer folder holding {TOKENIZER_FILE})"]
    file = root / TOKENIZER_FILE
    if not file.is_file():
        return [f"{named}: the folder holds no {TOKENIZER_FILE} (a Hugging Face fast tokenizer's file; a "
                f"slow tokenizer's files alone are not read)"]
    try:
        size = token_id_count(file)
    except ValueError as error:
        return [f"{named}: {file} is not a tokenizer the `tokenizers` library reads ({error})"]
    if size > vocab_size:
        return [f"{named}: the tokenizer's ids reach {size - 1} ({size} tokens with its added special tokens), "
                f"past model.vocab_size={vocab_size}: a token id can reach past the embedding; set "
                f"model.vocab_size={size} or more, or use a tokenizer of at most {vocab_size} tokens"]
    return []


def token_id_count(file: Path) -> int:
    """The largest token id of tokenizer.json + 1, added tokens included, read from the JSON (ValueError: the file
    is not a tokenizer: not JSON, a model the library does not have, or no model vocabulary)."""
    try:
        document = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not JSON: {error}") from None
    model = document.get("model") if isinstance(document, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind is not None and kind not in MODEL_TYPES:
        raise ValueError(f"model.type={kind!r}; the library's models are {', '.join(MODEL_TYPES)}")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict) and all(isinstance(token_id, int) for token_id in vocab.values()):
        ids = list(vocab.values())  # BPE, WordLevel, WordPiece: token -> id
    elif isinstance(vocab, list):
        ids = list(range(len(vocab)))  # Unigram: [token, score] in id order
    else:
        raise ValueError("no model.vocab of token ids")
    added = document.get("added_tokens") or []
    ids += [token["id"] for token in added if isinstance(token, dict) and isinstance(token.get("id"), int)]
    return max(ids, default=-1) + 1


def eos_token(folder: Path) -> Optional[str]:
    """The tokenizer's end-of-sequence token: tokenizer_config.json's eos_token, else special_tokens_map.json's."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            document = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        eos = document.get("eos_token") if isinstance(document, dict) else None
        eos = eos.get("content") if isinstance(eos, dict) else eos
        if isinstance(eos, str):
            return eos
    return None


def load_tokenizer(tokenizer_file: Path) -> Any:
    """tokenizer.json as a `tokenizers.Tokenizer`; one line when the library is missing or cannot read the file."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise DataError(f"{tokenizer_file}: reading it needs the `tokenizers` library (pip install "
                        "'primus-hydra[hf]')") from None
    try:
        return Tokenizer.from_file(str(tokenizer_file))
    except Exception as error:  # noqa: BLE001 - the library's own error, as one line
        raise DataError(f"{tokenizer_file}: not a tokenizer the `tokenizers` library reads ({error})") from None


def tokenize_documents(folder: Any, texts: list[bytes]) -> list[Any]:
    """Each text (UTF-8 bytes; invalid bytes become U+FFFD) as a numpy array of token ids, ended by the tokenizer's
    eos id when it has one, so that documents read back to back stay apart. No special tokens are added otherwise
    (no BOS from a post-processor): the same ids whichever backend reads them."""
    import numpy as np

    root = Path(str(folder)).expanduser()
    tokenizer = load_tokenizer(root / TOKENIZER_FILE)
    eos = eos_token(root)
    eos_id = tokenizer.token_to_id(eos) if eos is not None else None
    ending = [] if eos_id is None else [eos_id]
    total, done, started, shown = sum(len(text) for text in texts), 0, time.monotonic(), time.monotonic()
    documents: list[Any] = []
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # _fast: no character offsets (0.21+)
    for chunk in _chunks(texts):
        encodings = encode([text.decode("utf-8", errors="replace") for text in chunk], add_special_tokens=False)
        documents += [np.asarray(encoding.ids + ending, dtype=np.int32) for encoding in encodings]
        done += sum(len(text) for text in chunk)
        if time.monotonic() - shown >= PROGRESS_EVERY_S and done < total:
            shown = time.monotonic()
            log.info("data: tokenizing text with %s: %.1f of %.1f MB", root, done / 1e6, total / 1e6)
    elapsed = time.monotonic() - started
    log.info("data: %d documents, %.2f MB of text -> %d tokens with %s (%.1f MB/s)", len(documents), total / 1e6,
             sum(len(document) for document in documents), root, total / 1e6 / max(elapsed, 1e-9))
    return documents


def _chunks(texts: list[bytes]) -> list[list[bytes]]:
    chunks: list[list[bytes]] = [[]]
    size = 0
    for text in texts:
        if size >= CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(text)
        size += len(text)
    return chunks
