"""task=prepare_data before anything is written: which files task.input names and how each is read (plain, gzip,
zstd, Parquet, Arrow), the documents a record makes (Megatron-LM's tool's rules), the length percentiles of the
summary, the stats file the launch check trusts, and every setting it refuses: one line each, nothing written."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from helpers.compose import compose_primus
from helpers.tiny_tokenizer import write_tiny_tokenizer
from primus_hydra.errors import ConfigValidationError
from primus_hydra.tasks.data_prep.checks import chosen_dtype
from primus_hydra.tasks.data_prep.encode import _encoded_key, _parsed
from primus_hydra.tasks.data_prep.inputs import (
    JSONL,
    Chunk,
    InputError,
    RecordStream,
    input_files,
    input_paths,
    name_format,
)
from primus_hydra.tasks.data_prep.progress import DocumentLengths
from primus_hydra.tasks.prepare_data import PrepareDataTask

RECORDS = [{"text": "first document"}, {"text": ["two ", "sentences"], "title": "t"}, {"text": ""}]


def write_jsonl(path: Path, records=RECORDS, opener=open) -> Path:
    with opener(path, "wt") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)
    return path


def prepare(tmp_path: Path, *overrides: str):
    """The job task=prepare_data prepares for these overrides (ConfigValidationError: its lines)."""
    return PrepareDataTask.prepare_job(compose_primus("task=prepare_data", f"task.out={tmp_path / 'out' / 'c'}",
                                                      *overrides), None)


def failures(tmp_path: Path, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as raised:
        prepare(tmp_path, *overrides)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())  # nothing written
    return raised.value.failures


@pytest.mark.parametrize("name, expected", [
    ("a.jsonl", "jsonl"), ("a.json.gz", "jsonl"), ("a.ndjson.zst", "jsonl"), ("part-0.parquet", "parquet"),
    ("data-00000-of-00001.arrow", "arrow"), ("notes.txt.zstd", "text"), ("README", "text"), ("x.py", "text"),
])
def test_auto_format_comes_from_the_name_without_its_compression(name, expected):
    assert name_format(Path(name)) == expected


def test_a_folder_is_walked_in_sorted_order_without_hidden_names(tmp_path):
    for name in ("b/2.txt", "b/10.txt", "a.txt", ".hidden.txt", ".cache/x.txt", "c/.x_text_document.bin.partial-1"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert [p.relative_to(tmp_path).as_posix() for p in input_paths(str(tmp_path))] == ["a.txt", "b/10.txt", "b/2.txt"]
    assert [p.name for p in input_paths(str(tmp_path / "b" / "*.txt"))] == ["10.txt", "2.txt"]


def test_a_datasets_folder_is_read_in_the_order_its_state_lists(tmp_path):
    for name in ("dataset_info.json", "data-00001-of-00002.arrow", "data-00000-of-00002.arrow"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00001-of-00002.arrow"},
                                                                     {"filename": "data-00000-of-00002.arrow"}]}))
    assert [p.name for p in input_paths(str(tmp_path))] == ["data-00001-of-00002.arrow", "data-00000-of-00002.arrow"]


@pytest.mark.parametrize("spec, expected", [
    ("{root}/nothing", "task.input={root}/nothing: no such file or folder"),
    ("{root}/*.jsonl", "task.input={root}/*.jsonl: the pattern matches no file"),
    ("{root}/empty", "task.input={root}/empty: the folder holds no file"),
])
def test_an_input_that_names_no_file_is_one_line(tmp_path, spec, expected):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="^" + expected.format(root=tmp_path).replace("*", r"\*")):
        input_paths(spec.format(root=tmp_path))


def test_gzip_and_zstd_files_give_the_records_of_the_plain_file(tmp_path):
    import zstandard

    plain = write_jsonl(tmp_path / "a.jsonl")
    write_jsonl(tmp_path / "a.jsonl.gz", opener=gzip.open)
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    records = {}
    for name in ("a.jsonl", "a.jsonl.gz", "a.jsonl.zst"):
        files = input_files(str(tmp_path / name), "auto")
        stream = RecordStream(files, ["text"])
        records[name] = [record for chunk in stream.chunks() for record in chunk.records]
        assert stream.disk_bytes == files[0].size
    assert records["a.jsonl"] == records["a.jsonl.gz"] == records["a.jsonl.zst"]
    assert [number for number, _ in records["a.jsonl"]] == [1, 2, 3]


def test_parquet_gives_the_chosen_columns_of_each_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a", "b", "c"], "id": [1, 2, 3]}), tmp_path / "t.parquet", row_group_size=2)
    chunks = list(RecordStream(input_files(str(tmp_path / "t.parquet"), "auto"), ["text"]).chunks())
    assert [record for chunk in chunks for record in chunk.records] == [(0, {"text": "a"}), (1, {"text": "b"}),
                                                                        (2, {"text": "c"})]


def test_documents_follow_megatron_lms_tool_sentences_eod_and_empty_documents():
    chunk = Chunk(0, JSONL, [(n, (json.dumps(r) + "\n").encode()) for n, r in enumerate(RECORDS, start=1)])
    documents, bad = _parsed(chunk, ["text"])
    assert bad == [] and documents == [[["first document"]], [["two ", "sentences"]], [[""]]]
    encode = lambda texts: [list(text.encode()) for text in texts]  # noqa: E731 - byte ids
    encoded = _encoded_key([texts for (texts,) in documents], encode, eod=256)
    assert encoded.sequence_lengths == [15, 4, 10]  # the eod counts in a document's last sequence
    assert encoded.sequences_per_document == [1, 2, 0]  # the empty document: no sequence, no eod
    assert encoded.ids[14] == 256 and encoded.ids[-1] == 256 and len(encoded.ids) == 29


@pytest.mark.parametrize("line, reason", [
    (b'{"text": "cut\n', "not JSON"),
    (b'["a list"]\n', "a JSON list, not an object"),
    (b'{"body": "x"}\n', "no key 'text'"),
    (b'{"text": 3}\n', "key 'text' holds int, not text"),
])
def test_a_bad_record_is_named_by_its_line_and_blank_lines_are_no_records(line, reason):
    chunk = Chunk(0, JSONL, [(1, b'{"text": "ok"}\n'), (2, b"\n"), (3, line)])
    documents, bad = _parsed(chunk, ["text"])
    assert documents == [[["ok"]]] and len(bad) == 1 and bad[0][0] == 3 and bad[0][1].startswith(reason)


def test_document_length_percentiles_are_exact_and_flat_in_memory():
    lengths = DocumentLengths()
    lengths.add(list(range(1, 101)) + [70_000])
    assert (lengths.percentile(0.5), lengths.percentile(0.99), lengths.percentile(1.0)) == (51, 100, 70_000)
    assert DocumentLengths().percentile(0.5) == 0


def test_the_token_type_is_megatron_lms_choice_unless_given():
    assert (chosen_dtype("auto", 65499), chosen_dtype("auto", 65500), chosen_dtype("int32", 10)) == \
        ("uint16", "int32", "int32")


def test_the_launch_check_reads_the_largest_id_from_the_stats_file_while_it_describes_the_dataset(tmp_path):
    from primus_hydra.backends.common.indexed_file import indexed_data_failures
    from primus_hydra.backends.common.indexed_stats import dataset_signature

    prefix = tmp_path / "c_text_document"
    lengths = np.array([100], dtype=np.int32)
    header = b"MMIDIDX\x00\x00" + np.array([1], "<u8").tobytes() + bytes([8]) + np.array([1, 2], "<u8").tobytes()
    Path(f"{prefix}.idx").write_bytes(header + lengths.tobytes() + np.zeros(1, np.int64).tobytes()
                                      + np.array([0, 1], np.int64).tobytes())
    Path(f"{prefix}.bin").write_bytes(np.full(100, 7, np.uint16).tobytes())
    assert indexed_data_failures(str(prefix), vocab_size=8, seq_length=16, blends=False) == []  # read: 7 < 8
    stats = {"datasets": {prefix.name: {"max_token_id": 300, "signature": dataset_signature(prefix)}}}
    (tmp_path / "c_stats.json").write_text(json.dumps(stats))
    assert indexed_data_failures(str(prefix), 8, 16, False)[0].endswith("token id 300 >= model.vocab_size=8 "
                                                                        "(tokenized for another model, or "
                                                                        "model.vocab_size too small)")
    Path(f"{prefix}.bin").write_bytes(np.full(100, 5, np.uint16).tobytes())  # changed since: the stats are not trusted
    assert indexed_data_failures(str(prefix), 8, 16, False) == []


def test_settings_it_cannot_use_are_one_line_each_before_anything_is_written(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "no_tokenizer").mkdir()
    assert failures(tmp_path, f"task.input={tmp_path / 'none.jsonl'}", "task.tokenizer=byte") == [
        f"task.input={tmp_path / 'none.jsonl'}: no such file or folder (give a file, a folder or a glob)"]
    assert failures(tmp_path, f"task.input={tmp_path / 'empty.txt'}", "task.tokenizer=byte") == [
        f"task.input={tmp_path / 'empty.txt'}: the file is empty"]
    assert failures(tmp_path, f"task.input={corpus}", "task.tokenizer=byte", "task.json_keys=[body]") == [
        f"task.json_keys=['body']: {corpus}:1 has no key 'body' (its keys: text)"]
    assert failures(tmp_path, f"task.input={corpus}", f"task.tokenizer={tmp_path / 'no_tokenizer'}")[0].startswith(
        f"task.tokenizer={tmp_path / 'no_tokenizer'}: the folder holds no tokenizer.json")
    assert failures(tmp_path, f"task.input={corpus}", "task.tokenizer=byte", "task.out=/proc/1/c") == [
        "task.out=/proc/1/c: /proc/1 is not writable (no write permission); the outputs are written beside task.out "
        "and renamed into place; choose a folder this user can write"]


def test_a_vocabulary_past_the_token_type_and_a_tokenizer_without_eos_are_refused(tmp_path):
    from tokenizers import Tokenizer, models

    corpus = write_jsonl(tmp_path / "c.jsonl")
    wide = tmp_path / "wide"
    wide.mkdir()
    Tokenizer(models.WordLevel({f"w{i}": i for i in range(70_000)}, unk_token="w0")).save(str(wide / "tokenizer.json"))
    assert failures(tmp_path, f"task.input={corpus}", f"task.tokenizer={wide}", "task.token_dtype=uint16",
                    "task.append_eod=false") == [
        "task.token_dtype=uint16: the tokenizer has 70000 ids, more than uint16 holds (65536); set "
        "task.token_dtype=int32 or auto"]
    no_eos = write_tiny_tokenizer(tmp_path / "no_eos", eos=False)
    assert failures(tmp_path, f"task.input={corpus}", f"task.tokenizer={no_eos}") == [
        f"task.append_eod=true: the tokenizer {no_eos} names no end-of-document token (an eos_token in "
        f"tokenizer_config.json, a sentencepiece eos); set task.append_eod=false"]
    assert prepare(tmp_path, f"task.input={corpus}", f"task.tokenizer={wide}", "task.append_eod=false").dtype == "int32"


def test_existing_outputs_are_never_replaced_without_overwrite(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "c_text_document.bin").write_bytes(b"mine")
    with pytest.raises(ConfigValidationError) as raised:
        prepare(tmp_path, f"task.input={corpus}", "task.tokenizer=byte")
    assert raised.value.failures == [
        f"task.out={tmp_path / 'out' / 'c'}: {tmp_path / 'out' / 'c_text_document.bin'} already exists (from other "
        f"inputs or options); set task.overwrite=true to replace it, or choose another task.out"]
    job = prepare(tmp_path, f"task.input={corpus}", "task.tokenizer=byte", "task.overwrite=true", "task.workers=3")
    assert (job.workers, job.up_to_date, job.keys, job.dtype) == (3, False, ["text"], "uint16")
    assert (tmp_path / "out" / "c_text_document.bin").read_bytes() == b"mine"


def test_a_sentencepiece_model_gives_its_ids_and_its_eos_as_the_end_of_a_document(tmp_path):
    import sentencepiece

    from primus_hydra.tasks.data_prep.tokenizer import tokenizer_spec

    lines = [f"the value {n} is read from the file and returned" for n in range(200)]
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / "sp"),
                                             vocab_size=40, minloglevel=2)
    spec = tokenizer_spec(str(tmp_path / "sp.model"))
    model = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    assert (spec.kind, spec.vocab_size, spec.eod_id) == ("sentencepiece", 40, model.eos_id())
    assert spec.load()(["the value 7"]) == [model.encode("the value 7")]
