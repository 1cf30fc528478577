"""Token sources for the native trainer: mock (random), text (local text files: their bytes, or their token ids from
module.data.tokenizer's Hugging Face tokenizer), tokens (a memmap),
indexed (a Megatron .bin/.idx dataset, read as one token stream), sft (task=prepare_data's conversations and their
loss mask: one conversation per sequence, cut at seq_length + 1 tokens or padded; a target the mask leaves out, or
padding, is IGNORED, and `token_loss` averages over the others; with module.data.packing, conversations back to
back, each position's conversation given with the batch, so that the native model's attention stays within each).

Batches are a pure function of (seed, step, micro-batch index): resuming at step s needs no loader state, and
a resumed run sees exactly the batches an uninterrupted run would.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from primus_hydra.backends.common.data_sources import (
    DEFAULT_TEXT_LIMIT_BYTES,
    SFT_MASK_SUFFIX,
    SFT_TEXT_SUFFIX,
    default_text_corpus,
    files_read,
    no_text_line,
    sft_data_failures,
)
from primus_hydra.backends.common.indexed_file import document_token_offsets, indexed_data_failures, read_index
from primus_hydra.backends.common.text_tokenizer import tokenize_documents
from primus_hydra.backends.common.token_file import token_file_failure
from primus_hydra.config.data_split import split_fractions
from primus_hydra.errors import DataError


def text_documents(path: Optional[str], limit_bytes: int = DEFAULT_TEXT_LIMIT_BYTES,
                   tokenizer: Optional[str] = None) -> list[np.ndarray]:
    """The tokens of each text file under `path` (null: Python's stdlib), in name order, limit_bytes in all: its
    bytes (byte b is token b), or with `tokenizer` (a Hugging Face tokenizer folder) its token ids, each file ended
    by the tokenizer's eos id when it has one."""
    root = Path(path).expanduser() if path else default_text_corpus()
    if not root.exists():
        raise DataError(f"module.data.path={root}: no such file or folder (source=text wants text files)")
    texts = []
    for file, count in files_read(root, limit_bytes):
        with open(file, "rb") as handle:
            data = handle.read(count)
        if data:
            texts.append(data)
    if not texts:
        raise DataError(no_text_line(root))
    if tokenizer:
        return tokenize_documents(tokenizer, texts)
    return [np.frombuffer(text, dtype=np.uint8) for text in texts]


def load_text_tokens(path: Optional[str], limit_bytes: int = DEFAULT_TEXT_LIMIT_BYTES,
                     tokenizer: Optional[str] = None) -> np.ndarray:
    return np.concatenate(text_documents(path, limit_bytes, tokenizer))


def load_token_file(path: str, dtype: str, vocab_size: int, seq_length: int) -> np.ndarray:
    failure = token_file_failure(path, dtype, vocab_size, seq_length)  # checked before the run, and again here
    if failure:
        raise DataError(failure)
    return np.memmap(Path(path).expanduser(), dtype=dtype, mode="r")


def load_indexed_file(path: str, vocab_size: int, seq_length: int) -> np.ndarray:
    failures = indexed_data_failures(path, vocab_size, seq_length, blends=False)  # checked before the run too
    if failures:
        raise DataError(failures[0])
    return read_index(path).tokens()


IGNORED = -100  # a target that is not learned from (F.cross_entropy's ignore_index)


def token_loss(logits: torch.Tensor, targets: torch.Tensor, masked: bool = False) -> torch.Tensor:
    """The mean cross-entropy of the targets; masked (source=sft): over the targets that are not IGNORED only (0 when
    a micro-batch has none)."""
    flat, labels = logits.float().view(-1, logits.shape[-1]), targets.reshape(-1)
    if not masked:
        return F.cross_entropy(flat, labels)
    total = F.cross_entropy(flat, labels, reduction="sum", ignore_index=IGNORED)
    return total / (labels != IGNORED).sum().clamp(min=1)


class Batch(tuple):
    """(inputs, targets), as every trainer unpacks it. `documents`: for packed conversations (source=sft with
    module.data.packing) each input position's conversation in its sequence (0, 1, ...), what the native model
    masks attention by; None for every other source, whose trainers may ignore it."""

    documents: Optional[torch.Tensor]

    def __new__(cls, inputs: torch.Tensor, targets: torch.Tensor, documents: Optional[torch.Tensor] = None) -> "Batch":
        batch = super().__new__(cls, (inputs, targets))
        batch.documents = documents
        return batch


class SftDocuments:
    """task=prepare_data's `<path>_text_document` and `<path>_loss_mask_document`, document by document."""

    def __init__(self, path: str, vocab_size: int, seq_length: int):
        failures = sft_data_failures(path, vocab_size, seq_length)  # checked before the run too
        if failures:
            raise DataError(failures[0])
        text = read_index(f"{path}{SFT_TEXT_SUFFIX}")
        self.tokens, self.mask = text.tokens(), read_index(f"{path}{SFT_MASK_SUFFIX}").tokens()
        self.offsets = document_token_offsets(text)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def window(self, document: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The document's first `length` tokens and mask, padded with token 0 and mask 0."""
        start, end = int(self.offsets[document]), int(self.offsets[document + 1])
        end = min(end, start + length)
        tokens, mask = np.zeros(length, dtype=np.int64), np.zeros(length, dtype=np.int64)
        tokens[: end - start], mask[: end - start] = self.tokens[start:end], self.mask[start:end]
        return tokens, mask

    def packed(self, document: int, length: int, low: int,
               high: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`length` tokens and mask of the documents from `document` on, back to back (after `high - 1` comes `low`),
        the last one cut; and each position's ordinal among them (0 for the first; padding, where every document of
        low .. high - 1 is in and room is left, one more than the last)."""
        tokens, mask = np.zeros(length, dtype=np.int64), np.zeros(length, dtype=np.int64)
        ordinals, filled = np.full(length, high - low, dtype=np.int64), 0
        for ordinal in range(high - low):
            start, end = int(self.offsets[document]), int(self.offsets[document + 1])
            end = min(end, start + length - filled)
            placed = slice(filled, filled + end - start)
            tokens[placed], mask[placed], ordinals[placed] = self.tokens[start:end], self.mask[start:end], ordinal
            filled += end - start
            if filled == length:
                break
            document = document + 1 if document + 1 < high else low
        return tokens, mask, ordinals


HELD_OUT_STREAM = 2 ** 32 - 1  # the seed word that sets evaluation's draws apart from every training step's


class TokenBatches:
    """Random windows of seq_length + 1 tokens; inputs are the first seq_length, targets the last.

    With `held_out` > 0 the last `held_out` share of the token stream is kept from training: training windows
    start before it, and `held_out_batches()` draws its windows from it only (mock tokens: from a seed stream no
    training step uses)."""

    def __init__(self, source: str, path: Optional[str], token_dtype: str, vocab_size: int, seq_length: int, seed: int,
                 held_out: float = 0.0, tokenizer: Optional[str] = None, packing: bool = False):
        self.source, self.vocab_size, self.seq_length, self.seed = source, vocab_size, seq_length, seed
        self.packing = packing
        self.tokens: Optional[np.ndarray] = None
        self.documents: Optional[SftDocuments] = None
        if source == "sft":
            self.documents = SftDocuments(str(path), vocab_size, seq_length)
            total = len(self.documents)
            self.train_end = total - int(total * held_out)
            if held_out and min(self.train_end, total - self.train_end) < 1:
                raise DataError(f"module.data.split: {total} conversations in module.data.path={path} leave "
                                f"{self.train_end} for training and {total - self.train_end} held out; give more data "
                                f"or change the split")
            return
        if source == "text":
            self.tokens = load_text_tokens(path, tokenizer=tokenizer)
        elif source == "tokens":
            self.tokens = load_token_file(path, token_dtype, vocab_size, seq_length)
        elif source == "indexed":  # Megatron's .bin/.idx: its documents back to back, as one token stream
            self.tokens = load_indexed_file(path, vocab_size, seq_length)
        if self.tokens is not None and len(self.tokens) <= seq_length + 1:
            raise DataError(
                f"module.data.path={path}: {len(self.tokens)} tokens is too short for module.seq_length={seq_length}"
            )
        total = len(self.tokens) if self.tokens is not None else 0
        self.train_end = total - int(total * held_out)
        if self.tokens is not None and held_out and min(self.train_end, total - self.train_end) <= seq_length + 1:
            raise DataError(
                f"module.data.split: {total} tokens in module.data.path={path} leave {self.train_end} for training and "
                f"{total - self.train_end} held out, too few for windows of module.seq_length={seq_length}; give "
                f"more data or change the split")

    @classmethod
    def for_module(cls, module: Any, vocab_size: int) -> "TokenBatches":
        """The job's token source (module: the typed or composed module config); the valid share of
        module.data.split held out when module.eval_interval evaluates."""
        data = module.data
        held_out = split_fractions(str(data.split))[1] if module.eval_interval else 0.0
        return cls(str(data.source), data.path, str(data.token_dtype), vocab_size, module.seq_length, module.seed,
                   held_out, getattr(data, "tokenizer", None), bool(getattr(data, "packing", False)))

    @property
    def masked(self) -> bool:
        """Whether targets may be IGNORED (source=sft): the loss is token_loss(..., masked=True)."""
        return self.documents is not None

    def _sft_sequence(self, step: int, index: int, held_out: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """tokens, mask and each position's document in the sequence (one conversation alone: all 0)."""
        rng = np.random.default_rng([self.seed, HELD_OUT_STREAM, step, index] if held_out else [self.seed, step, index])
        low, high = (self.train_end, len(self.documents)) if held_out else (0, self.train_end)
        first = low + int(rng.integers(0, high - low))
        if self.packing:
            return self.documents.packed(first, self.seq_length + 1, low, high)
        tokens, mask = self.documents.window(first, self.seq_length + 1)
        return tokens, mask, np.zeros_like(tokens)

    def sequence(self, step: int, index: int, held_out: bool = False) -> np.ndarray:
        """Sequence `index` of the global batch of `step`: the same tokens whatever the parallel layout."""
        rng = np.random.default_rng([self.seed, HELD_OUT_STREAM, step, index] if held_out else [self.seed, step, index])
        if self.tokens is None:  # mock
            return rng.integers(0, self.vocab_size, size=self.seq_length + 1, dtype=np.int64)
        low, high = (self.train_end, len(self.tokens)) if held_out else (0, self.train_end)
        start = low + int(rng.integers(0, high - low - self.seq_length - 1))
        return np.asarray(self.tokens[start : start + self.seq_length + 1], dtype=np.int64)

    def batch(self, step: int, first_index: int, batch_size: int, held_out: bool = False) -> Batch:
        """Sequences first_index .. first_index + batch_size - 1 of the step's global batch, as (inputs, targets);
        packed conversations with their documents (Batch.documents)."""
        if self.documents is not None:
            tokens, mask, documents = (np.stack(parts) for parts in zip(*(
                self._sft_sequence(step, first_index + i, held_out) for i in range(batch_size))))
            # a target in the next conversation is never learned: alone, no conversation has its first token as one
            learned = (mask[:, 1:] == 1) & (documents[:, 1:] == documents[:, :-1])
            targets = np.where(learned, tokens[:, 1:], IGNORED)
            inputs_documents = torch.from_numpy(documents[:, :-1]) if self.packing else None
            return Batch(torch.from_numpy(tokens[:, :-1]), torch.from_numpy(targets), inputs_documents)
        window = torch.from_numpy(np.stack([self.sequence(step, first_index + i, held_out) for i in range(batch_size)]))
        return Batch(window[:, :-1], window[:, 1:])

    def held_out_batches(self) -> "HeldOutBatches":
        return HeldOutBatches(self)


class HeldOutBatches:
    """The evaluation batches, behind TokenBatches' interface: `step` is the evaluation's batch number."""

    def __init__(self, batches: TokenBatches):
        self.batches = batches
        self.masked = batches.masked

    def batch(self, step: int, first_index: int, batch_size: int) -> Batch:
        return self.batches.batch(step, first_index, batch_size, held_out=True)
