"""The pipeline of task=prepare_data: chunks of records read in order, tokenized by the workers, their documents
added in the same order to megatron-core's IndexedDatasetBuilder (one per key) under temporary names, renamed into
place when every document is in. Whatever the number of workers, the bytes are the same.

Memory stays flat: at most IN_FLIGHT_PER_WORKER chunks per worker are read ahead of the writer (Pool.imap would
read the whole input into its queue). Whatever stops the run (an error, Ctrl-C, SIGTERM) removes the temporary
files: a stopped run leaves no dataset, and a rerun starts over.
"""
from __future__ import annotations

import collections
import multiprocessing
import os
import signal
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from primus_hydra.backends.common.indexed_stats import files_signature
from primus_hydra.errors import DataError
from primus_hydra.tasks.data_prep.checks import PrepareDataJob
from primus_hydra.tasks.data_prep.encode import EncodedChunk, encode_chunk, start_pool_worker, start_worker
from primus_hydra.tasks.data_prep.inputs import Chunk, RecordStream
from primus_hydra.tasks.data_prep.outputs import OutputNames, remove_partials, write_json_atomically
from primus_hydra.tasks.data_prep.progress import DocumentLengths, Progress
from primus_hydra.tasks.data_prep.sft import MASK_KEY

IN_FLIGHT_PER_WORKER = 4
LABEL = "prepare_data"


class KeyTally:
    """One dataset's counts while it is written."""

    def __init__(self):
        self.documents = self.tokens = self.empty = 0
        self.max_token_id = -1
        self.lengths = DocumentLengths()


def _indexed_dataset_builder() -> Any:
    """megatron-core's builder (its import brings torch; its warnings about Transformer Engine say nothing here)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    except ImportError as error:
        raise DataError(f"task=prepare_data writes with megatron-core's IndexedDatasetBuilder, which does not import "
                        f"here ({error}); pip install 'primus-hydra[data]'") from None
    return IndexedDatasetBuilder


def _worker_context() -> Any:
    """forkserver where there is one: workers forked from a clean process, not from this one, whose threads (torch's,
    the `tokenizers` library's, a test runner's) a fork would copy mid-lock. They start with encode.py loaded."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([encode_chunk.__module__])
    return context


@contextmanager
def _encoded_in_order(job: PrepareDataJob, chunks: Iterator[Chunk]) -> Iterator[Iterator[EncodedChunk]]:
    """The chunks tokenized, in their order: in this process with one worker, else by a pool of job.workers
    processes with a bounded number of chunks in flight."""
    if job.workers == 1:
        start_worker(job.tokenizer, job.keys, job.append_eod, job.sft, job.sentences)
        yield (encode_chunk(chunk) for chunk in chunks)
        return
    context = _worker_context()
    settings = (job.tokenizer, job.keys, job.append_eod, job.sft, job.sentences)
    with context.Pool(job.workers, initializer=start_pool_worker, initargs=settings) as pool:
        def ordered() -> Iterator[EncodedChunk]:
            pending: collections.deque = collections.deque()
            for chunk in chunks:
                pending.append(pool.apply_async(encode_chunk, (chunk,)))
                if len(pending) >= job.workers * IN_FLIGHT_PER_WORKER:
                    yield pending.popleft().get()
            while pending:
                yield pending.popleft().get()
        yield ordered()


@contextmanager
def _sigterm_stops_the_run() -> Iterator[None]:
    """SIGTERM (a scheduler's kill) unwinds like Ctrl-C, so the temporary files go."""
    if multiprocessing.current_process().name != "MainProcess" or signal.getsignal(signal.SIGTERM) is None:
        yield
        return
    try:
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _bad_records(job: PrepareDataJob, encoded: EncodedChunk) -> int:
    if encoded.bad_records and not job.skip_bad_records:
        number, reason = encoded.bad_records[0]
        raise DataError(f"{job.files[encoded.file].path}:{number}: {reason} (task.skip_bad_records=true skips and "
                        f"counts such records)")
    return len(encoded.bad_records)


def _add(builder: Any, tally: KeyTally, encoded: Any, dtype: type) -> int:
    """Add one chunk's documents of a key; returns its tokens."""
    ids, at, sequence, sizes = encoded.ids, 0, 0, []
    for count in encoded.sequences_per_document:
        lengths = encoded.sequence_lengths[sequence: sequence + count]
        size = sum(lengths)
        builder.add_document(ids[at: at + size].astype(dtype, copy=False), lengths)
        at, sequence = at + size, sequence + count
        sizes.append(size)
    tally.lengths.add(sizes)
    tally.empty += sizes.count(0)
    tally.documents += len(sizes)
    tally.tokens += len(ids)
    if len(ids):
        tally.max_token_id = max(tally.max_token_id, int(ids.max()))
    return len(ids)


def _summary(job: PrepareDataJob, tallies: dict, bad: int, seconds: float, text_bytes: int) -> dict:
    tokens = sum(tally.tokens for key, tally in tallies.items() if not (job.sft and key == MASK_KEY))
    datasets = {}
    for key, tally in tallies.items():
        prefix = job.names.prefix(key)
        datasets[prefix.name] = {
            "key": key, "documents": tally.documents, "tokens": tally.tokens, "empty_documents": tally.empty,
            "tokens_per_document": {"p50": tally.lengths.percentile(0.5), "p99": tally.lengths.percentile(0.99)},
            "max_token_id": tally.max_token_id,
            "signature": files_signature(*(OutputNames.partial(Path(f"{prefix}{suffix}")) for suffix in (".bin", ".idx"))),
        }
    return {"fingerprint": job.fingerprint, "tokenizer": job.tokenizer.describe(), "vocab_size": job.tokenizer.vocab_size,
            "dtype": job.dtype, "append_eod": job.append_eod, "json_keys": job.keys,
            "inputs": [str(file.path) for file in job.files], "input_bytes": sum(file.size for file in job.files),
            "text_bytes": text_bytes, "bad_records_skipped": bad, "tokens": tokens, "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / max(seconds, 1e-9), 1), "workers": job.workers, "datasets": datasets}


def _print_summary(stats: dict) -> None:
    for name, entry in stats["datasets"].items():
        lengths = entry["tokens_per_document"]
        print(f"{LABEL}: {name}: {entry['documents']} documents, {entry['tokens']} tokens, {entry['empty_documents']} "
              f"empty (kept as documents without tokens, as Megatron-LM's tool keeps them), "
              f"tokens per document p50 {lengths['p50']}, p99 {lengths['p99']}, largest id {entry['max_token_id']}",
              flush=True)
    skipped = f", {stats['bad_records_skipped']} bad records skipped" if stats["bad_records_skipped"] else ""
    print(f"{LABEL}: {stats['tokens']} tokens in {stats['seconds']:.1f} s ({stats['tokens_per_s']:.0f} tokens/s, "
          f"{stats['workers']} worker(s), {stats['dtype']}){skipped}", flush=True)


def write_datasets(job: PrepareDataJob) -> dict:
    """Tokenize every input into the job's datasets and stats file, renamed into place at the end; returns the stats."""
    names, dtype = job.names, getattr(np, job.dtype)
    names.out.parent.mkdir(parents=True, exist_ok=True)
    partials = [OutputNames.partial(path) for path in names.files(job.keys)]
    stream = RecordStream(job.files, job.keys)
    tallies = {key: KeyTally() for key in job.keys}
    progress, bad = None, 0
    try:
        with _sigterm_stops_the_run(), _encoded_in_order(job, stream.chunks()) as encoded_chunks:
            builder_class = _indexed_dataset_builder()
            dtypes = {key: np.uint8 if job.sft and key == MASK_KEY else dtype for key in job.keys}
            builders = {key: builder_class(str(OutputNames.partial(Path(f"{names.prefix(key)}.bin"))), dtype=dtypes[key])
                        for key in job.keys}
            progress = Progress(sum(file.size for file in job.files), LABEL)
            for encoded in encoded_chunks:
                bad += _bad_records(job, encoded)
                tokens = sum(_add(builders[key], tallies[key], part, dtypes[key]) for key, part in encoded.keys.items()
                             if key != MASK_KEY or not job.sft)
                if job.sft:
                    _add(builders[MASK_KEY], tallies[MASK_KEY], encoded.keys[MASK_KEY], dtypes[MASK_KEY])
                documents = len(next(iter(encoded.keys.values())).sequences_per_document) if encoded.keys else 0
                progress.update(documents, tokens, encoded.payload_bytes, stream.disk_bytes)
            for key, builder in builders.items():
                builder.finalize(str(OutputNames.partial(Path(f"{names.prefix(key)}.idx"))))
        seconds = progress.close()
        stats = _summary(job, tallies, bad, seconds, progress.text_bytes)
        for partial, final in zip(partials[:-1], names.files(job.keys)[:-1]):
            os.replace(partial, final)
        write_json_atomically(names.stats, stats)
    except BaseException as error:
        if progress is not None:
            progress.close()
        remove_partials(partials)
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C or SIGTERM: one line, the shell's exit code for SIGINT
            print(f"{LABEL}: stopped; the partial files are removed, no dataset was written", file=sys.stderr,
                  flush=True)
            raise SystemExit(130) from None
        raise
    _print_summary(stats)
    return stats
