"""A chunk of records as token ids, in a worker. The documents are those Megatron-LM's tools/preprocess_data.py
makes: a key's value is a string (one sequence) or a list of strings (one sequence each, empty ones left out); the
end-of-document id closes a document that has tokens; an empty document stays a document with no sequence.

A JSONL line that is not a JSON object, lacks a key, or holds something other than text for it, is a bad record:
named by its line, never tokenized.
"""
from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from primus_hydra.tasks.data_prep.inputs import JSONL, TEXT, Chunk
from primus_hydra.tasks.data_prep.sentences import SentenceSplit, make_splitter
from primus_hydra.tasks.data_prep.sft import (
    MASK_KEY,
    RAW_FORMATS,
    TEXT_KEY,
    ChatTemplate,
    ConversationError,
    PlainTemplate,
    RawTemplate,
    chat_template_of,
    conversation,
    conversation_ids,
)
from primus_hydra.tasks.data_prep.tokenizer import BYTE, Encode, TokenizerSpec


@dataclass
class EncodedKey:
    """One key's documents of a chunk: their ids back to back, each sequence's length, each document's sequences."""

    ids: np.ndarray
    sequence_lengths: list = field(default_factory=list)
    sequences_per_document: list = field(default_factory=list)


@dataclass
class EncodedChunk:
    file: int
    payload_bytes: int
    keys: dict  # key -> EncodedKey
    bad_records: list = field(default_factory=list)  # (line number, reason)


class BadRecord(ValueError):
    pass


_worker: dict = {}  # this process's loaded tokenizer and options (set by start_worker)


def start_worker(spec: TokenizerSpec, keys: list, append_eod: bool, sft: Optional[str] = None,
                 sentences: Optional[SentenceSplit] = None) -> None:
    """Load the tokenizer once per worker; each worker tokenizes on one core (the workers are the parallelism).
    sft (chat or instruction): records are conversations, rendered by the chat template or the plain one;
    alpaca and squad: by their own prompts."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    encode = spec.load()
    template = None
    if sft:
        if sft in RAW_FORMATS:
            template = RawTemplate(encode)
        else:
            template = ChatTemplate(spec.path) if chat_template_of(spec.path) else PlainTemplate(encode)
    _worker.update(encode=encode, keys=list(keys), eod=spec.eod_id if append_eod else None,
                   takes_bytes=spec.kind == BYTE, sft=sft, template=template,
                   split=make_splitter(sentences) if sentences else None)


def start_pool_worker(spec: TokenizerSpec, keys: list, append_eod: bool, sft: Optional[str] = None,
                      sentences: Optional[SentenceSplit] = None) -> None:
    """start_worker in a pool's process, which leaves Ctrl-C to the writer (it stops the pool and cleans up). A
    failure is kept and raised by the first chunk, so the writer gets it: a pool whose initializer raises starts new
    workers for ever, and the run would hang."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        start_worker(spec, keys, append_eod, sft, sentences)
    except Exception as error:  # noqa: BLE001 - handed to the writer whole
        _worker["failure"] = error


def _texts_of(record: Any, keys: list) -> list:
    """Per key, the record's texts (a list of strings) (BadRecord: why not)."""
    if not isinstance(record, dict):
        raise BadRecord(f"a JSON {type(record).__name__}, not an object")
    texts = []
    for key in keys:
        if key not in record:
            raise BadRecord(f"no key {key!r} (task.json_keys={keys}; the record has {sorted(record)[:8]})")
        value = record[key]
        if isinstance(value, str):
            texts.append([value])
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            texts.append(value)
        else:
            raise BadRecord(f"key {key!r} holds {type(value).__name__}, not text (a string or a list of strings)")
    return texts


def _parsed(chunk: Chunk, keys: list) -> tuple[list, list]:
    """(per record, per key its texts), (line number, reason) of the bad records."""
    documents, bad = [], []
    for number, payload in chunk.records:
        if chunk.format == TEXT:
            documents.append([[payload]])
            continue
        try:
            if chunk.format == JSONL:
                if not payload.strip():
                    continue  # a blank line is no record
                try:
                    payload = json.loads(payload)
                except ValueError as error:
                    raise BadRecord(f"not JSON ({error})") from None
            documents.append(_texts_of(payload, keys))
        except BadRecord as error:
            bad.append((number, str(error)))
    return documents, bad


def _encoded_key(sentences_of_documents: list, encode: Encode, eod: Optional[int]) -> EncodedKey:
    flat = [sentence for sentences in sentences_of_documents for sentence in sentences]
    ids_of = iter(encode(flat))
    pieces, result = [], EncodedKey(np.empty(0, dtype=np.int64))
    for sentences in sentences_of_documents:
        lengths = []
        for _ in sentences:
            ids = next(ids_of)
            if len(ids):
                pieces.append(np.frombuffer(ids, dtype=np.uint8) if isinstance(ids, bytes) else ids)
                lengths.append(len(ids))
        if lengths and eod is not None:
            pieces.append([eod])
            lengths[-1] += 1
        result.sequence_lengths += lengths
        result.sequences_per_document.append(len(lengths))
    if pieces:
        result.ids = np.concatenate([np.asarray(piece, dtype=np.int64) for piece in pieces])
    return result


def _encoded_conversations(chunk: Chunk) -> EncodedChunk:
    """An SFT chunk: each record's conversation as one document of ids, and the same lengths of 0/1 mask."""
    ids, masks, bad = [], [], []
    for number, payload in chunk.records:
        if not payload.strip():
            continue
        try:
            try:
                record = json.loads(payload)
            except ValueError as error:
                raise BadRecord(f"not JSON ({error})") from None
            record_ids, record_mask = conversation_ids(_worker["template"], conversation(record, _worker["sft"]),
                                                       _worker["eod"])
        except (BadRecord, ConversationError) as error:
            bad.append((number, str(error)))
            continue
        ids.append(record_ids)
        masks.append(record_mask)

    def key_of(arrays: list) -> EncodedKey:
        lengths = [len(array) for array in arrays]
        return EncodedKey(np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64),
                          [length for length in lengths if length], [1 if length else 0 for length in lengths])

    return EncodedChunk(chunk.file, chunk.payload_bytes, {TEXT_KEY: key_of(ids), MASK_KEY: key_of(masks)}, bad)


def _as_encoded(sentences: list) -> list:
    """Split sentences as the tokenizer takes them (the byte tokenizer: UTF-8 bytes)."""
    return [sentence.encode("utf-8") for sentence in sentences] if _worker["takes_bytes"] else sentences


def encode_chunk(chunk: Chunk) -> EncodedChunk:
    """The chunk's documents as ids, in this worker (start_worker has run here)."""
    if "failure" in _worker:
        raise _worker["failure"]
    if _worker.get("sft"):
        return _encoded_conversations(chunk)
    encode, keys, eod = _worker["encode"], _worker["keys"], _worker["eod"]
    documents, bad = _parsed(chunk, keys)
    encoded = {}
    for position, key in enumerate(keys[:1] if chunk.format == TEXT else keys):
        texts = [per_key[position] for per_key in documents]
        split = _worker.get("split")
        if chunk.format == TEXT:
            texts = [[text if _worker["takes_bytes"] and not split else text.decode("utf-8", errors="replace")
                      for text in sentences] for sentences in texts]
        if split:
            texts = [_as_encoded([sentence for text in sentences for sentence in split(text)])
                     for sentences in texts]
        encoded[key] = _encoded_key(texts, encode, eod)
    return EncodedChunk(chunk.file, chunk.payload_bytes, encoded, bad)

