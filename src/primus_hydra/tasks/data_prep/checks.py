"""Everything task=prepare_data can find wrong before the first document is read, one line each: the output prefix,
the input (missing, empty, a key its first record lacks), the tokenizer (no tokenizer.json, no end-of-document id
when one is appended, more ids than the token type holds), the workers, outputs that exist. The result is the job:
what `write` needs, all checked.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from primus_hydra.config.paths import writable_dir_failure
from primus_hydra.errors import ConfigValidationError
from primus_hydra.tasks.data_prep.inputs import (
    ARROW,
    JSONL,
    PARQUET,
    TEXT,
    InputError,
    InputFile,
    column_names,
    first_json_record,
    input_files,
)
from primus_hydra.tasks.data_prep.outputs import OutputNames, existing_outputs, fingerprint, is_up_to_date
from primus_hydra.tasks.data_prep.sentences import SENTENCE_LEVEL, SentenceSplit, with_punkt_folder
from primus_hydra.tasks.data_prep.sft import OUTPUT_KEYS, RAW_FORMATS, RECORD_KEYS, SFT_FORMATS, chat_template_of
from primus_hydra.tasks.data_prep.tokenizer import TokenizerError, TokenizerSpec, tokenizer_spec

UINT16_LIMIT = 65500  # Megatron-LM's tool's rule: uint16 below this many ids, else int32
DTYPE_CAPACITY = {"uint16": 1 << 16, "int32": 1 << 31}


@dataclass
class PrepareDataJob:
    files: list  # InputFile
    tokenizer: TokenizerSpec
    names: OutputNames
    keys: list
    dtype: str  # uint16 or int32
    append_eod: bool
    workers: int
    skip_bad_records: bool
    fingerprint: str
    up_to_date: bool
    warnings: tuple = ()
    plan: None = None
    sft: Optional[str] = None  # chat or instruction: keys are the text and loss-mask datasets
    sentences: Optional[SentenceSplit] = None  # task.split_sentences: how texts are cut into sentences


def chosen_dtype(typed: str, vocab_size: int) -> str:
    if typed == "auto":
        return "uint16" if vocab_size < UINT16_LIMIT else "int32"
    return typed


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _out_failure(task: Any) -> tuple[Optional[str], Optional[OutputNames]]:
    if not task.out:
        return "task.out is not set: give the output prefix (<out>_text_document.bin/.idx are written)", None
    out = Path(str(task.out)).expanduser().absolute()
    if not out.name or str(task.out).endswith(("/", os.sep)):
        return f"task.out={task.out}: a prefix, not a folder (as Megatron's --output-prefix: /data/corpus)", None
    failure = writable_dir_failure("task.out", str(out.parent), "the outputs are written beside task.out and "
                                   "renamed into place; choose a folder this user can write")
    named = failure.replace(f"task.out={out.parent}:", f"task.out={task.out}:", 1) if failure else None
    return named, OutputNames(out)


def _record_failures(files: list, keys: list) -> list[str]:
    """A key the first JSONL record lacks, a column a table lacks; text files read with more than one key."""
    failures = []
    jsonl = [file for file in files if file.format == JSONL]
    if jsonl:
        number, record = first_json_record(jsonl[0])
        if not isinstance(record, dict):
            failures.append(f"{jsonl[0].path}:{number}: a JSON {type(record).__name__}, not an object (JSONL holds "
                            f"one JSON object a line)")
        else:
            failures += [f"task.json_keys={keys}: {jsonl[0].path}:{number} has no key {key!r} (its keys: "
                         f"{', '.join(sorted(record)[:10])})" for key in keys if key not in record]
    for file in (file for file in files if file.format in (PARQUET, ARROW)):
        columns = column_names(file)
        missing = [key for key in keys if key not in columns]
        if missing:
            failures.append(f"task.json_keys={keys}: {file.path} has no column {missing[0]!r} (its columns: "
                            f"{', '.join(columns[:10])})")
            break
    if len(keys) != 1 and any(file.format == TEXT for file in files):
        text = next(file for file in files if file.format == TEXT)
        failures.append(f"task.json_keys={keys}: {text.path} is read as plain text, one document under one key; "
                        f"give one key (its name names the dataset), or task.format=jsonl")
    return failures


def _tokenizer_failures(spec: TokenizerSpec, task: Any) -> tuple[list[str], str]:
    dtype = chosen_dtype(str(task.token_dtype), spec.vocab_size)
    failures = []
    if spec.vocab_size > DTYPE_CAPACITY[dtype]:
        failures.append(f"task.token_dtype={task.token_dtype}: the tokenizer has {spec.vocab_size} ids, more than "
                        f"{dtype} holds ({DTYPE_CAPACITY[dtype]}); set task.token_dtype=int32 or auto")
    if task.append_eod and spec.eod_id is None:
        failures.append(f"task.append_eod=true: the tokenizer {task.tokenizer} names no end-of-document token (an "
                        f"eos_token in tokenizer_config.json, a sentencepiece eos); set task.append_eod=false")
    return failures, dtype


def prepare_data_job(task: Any) -> PrepareDataJob:
    """The job task=prepare_data runs, every setting checked (ConfigValidationError: one line per failure)."""
    keys = [str(key) for key in (task.json_keys or [])]
    out_failure, names = _out_failure(task)
    failures = [out_failure] if out_failure else []
    sft = str(task.format) if str(task.format) in SFT_FORMATS else None
    if sft and keys != ["text"]:
        failures.append(f"task.json_keys={keys}: task.format={sft} reads {' and '.join(RECORD_KEYS[sft])} and "
                        f"writes the text and loss_mask datasets; leave task.json_keys unset")
    if sft:
        keys = RECORD_KEYS[sft]
    if not keys or any(not key for key in keys):
        failures.append(f"task.json_keys={keys}: give one or more non-empty keys, e.g. task.json_keys=[text]")
    sentences = SentenceSplit(str(task.lang), bool(task.keep_newlines)) if task.split_sentences else None
    if sentences and sft:
        failures.append(f"task.split_sentences=true: task.format={sft} reads whole conversations; leave "
                        f"task.split_sentences unset")
    elif sentences:
        sentences, failure = with_punkt_folder(sentences)
        failures += [failure] if failure else []
        names = OutputNames(names.out, SENTENCE_LEVEL) if names else None
    if task.workers is not None and int(task.workers) < 1:
        failures.append(f"task.workers={task.workers}: at least 1 (null: one per CPU core)")
    files: list[InputFile] = []
    spec, dtype = None, "uint16"
    try:
        files = input_files(str(task.input), JSONL if sft else str(task.format)) if task.input else []
        if not task.input:
            failures.append("task.input is not set: give a file, a folder or a glob of text, JSONL or Parquet")
    except InputError as error:
        failures.append(str(error))
    try:
        spec = tokenizer_spec(task.tokenizer)
        tokenizer_failures, dtype = _tokenizer_failures(spec, task)
        failures += tokenizer_failures
        if sft and sft not in RAW_FORMATS and chat_template_of(spec.path) and not _transformers_findable():
            failures.append(f"task.tokenizer={task.tokenizer}: its chat template is rendered by transformers, which "
                            f"is not installed (pip install transformers)")
    except TokenizerError as error:
        failures.append(str(error))
    if files and keys and all(keys):
        try:
            failures += _record_failures(files, keys)
        except InputError as error:
            failures.append(str(error))
    if failures:
        raise ConfigValidationError(failures)
    if sft:
        failures += [f"{files[0].path}: task.format={sft} reads JSONL; this file is {files[0].format}"
                     for file in files[:1] if any(file.format != JSONL for file in files)]
        if failures:
            raise ConfigValidationError(failures)
        keys = list(OUTPUT_KEYS)
    options = {"format": str(task.format), "json_keys": keys, "append_eod": bool(task.append_eod), "dtype": dtype,
               **({"sentences": [sentences.lang, sentences.keep_newlines]} if sentences else {}),
               **({"chat_template": chat_template_of(spec.path)} if sft and sft not in RAW_FORMATS else {})}
    digest = fingerprint(files, spec, options)
    up_to_date = is_up_to_date(names, keys, digest)
    existing = existing_outputs(names, keys)
    if existing and not up_to_date and not task.overwrite:
        raise ConfigValidationError([f"task.out={task.out}: {existing[0]} already exists (from other inputs or "
                                     f"options); set task.overwrite=true to replace it, or choose another task.out"])
    workers = int(task.workers) if task.workers is not None else usable_cpus()
    return PrepareDataJob(files, spec, names, keys, dtype, bool(task.append_eod), workers,
                          bool(task.skip_bad_records), digest, up_to_date, sft=sft, sentences=sentences)


def _transformers_findable() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None
