"""Megatron indexed datasets read without megatron-core (backends/common/indexed_file.py): the files megatron-core's
own builder writes, Megatron's --data-path blend spelling, and one line for each way a dataset cannot feed a run."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.indexed_data import random_documents, write_indexed
from helpers.libraries import needs_megatron_core
from primus_hydra.backends.common.indexed_file import (
    IndexedFileError,
    indexed_data_failures,
    parse_blend,
    read_index,
)


@pytest.mark.parametrize("path, expected", [
    ("/data/c4", [(None, "/data/c4")]),
    ("0.7 /data/c4 0.3 /data/code", [(0.7, "/data/c4"), (0.3, "/data/code")]),
])
def test_a_data_path_is_one_prefix_or_megatrons_weighted_blend(path, expected):
    assert parse_blend(path) == expected


@pytest.mark.parametrize("path, message", [
    ("0.7 /data/c4 /data/code", "an even number of words"),
    ("heavy /data/c4 0.3 /data/code", "'heavy' is not a weight"),
    ("0 /data/c4 1 /data/code", "weight 0 must be > 0"),
])
def test_a_malformed_blend_is_one_line(path, message):
    with pytest.raises(IndexedFileError, match=message):
        parse_blend(path)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("indexed")
    documents = random_documents(0, 12, 1000)
    write_indexed({root / "docs": documents, root / "tiny": [np.arange(10)], root / "wide": documents},
                  dtypes={root / "wide": "int32"})
    return root, documents


@needs_megatron_core
@pytest.mark.parametrize("name, dtype", [("docs", np.uint16), ("wide", np.int32)])
def test_what_megatron_cores_builder_writes_reads_back_token_for_token(datasets, name, dtype):
    root, documents = datasets
    found = read_index(str(root / name))
    assert (found.dtype, found.sequences, found.documents) == (dtype, 12, 13)
    assert found.token_count() == sum(len(d) for d in documents)
    np.testing.assert_array_equal(found.tokens(), np.concatenate(documents))
    assert indexed_data_failures(str(root / name), vocab_size=1000, seq_length=64, blends=False) == []


@needs_megatron_core
def test_each_way_a_dataset_cannot_feed_a_run_is_one_line(datasets, tmp_path):
    root, _ = datasets
    docs = str(root / "docs")

    def failures(path, vocab=1000, seq=64, blends=False):
        return indexed_data_failures(path, vocab_size=vocab, seq_length=seq, blends=blends)

    assert failures(str(tmp_path / "missing")) == [
        f"module.data.path={tmp_path / 'missing'}: no missing.idx or missing.bin (source=indexed reads Megatron's "
        f"<prefix>.bin and <prefix>.idx, as written by Megatron's tools/preprocess_data.py)"]
    assert failures(str(root / "tiny")) == [f"module.data.path={root / 'tiny'}: 10 tokens is too short for "
                                            f"module.seq_length=64"]
    largest = int(read_index(docs).tokens().max())
    assert failures(docs, vocab=largest) == [f"module.data.path={docs}: token id {largest} >= model.vocab_size={largest} "
                                             f"(tokenized for another model, or model.vocab_size too small)"]
    assert failures(f"1 {docs} 1 {docs}") == [f"module.data.path=1 {docs} 1 {docs}: a blend of 2 datasets is read by "
                                              f"backend=megatron; backend=torch reads one prefix"]
    assert failures(f"1 {docs} 1 {docs}", blends=True) == []
    (tmp_path / "cut.idx").write_bytes((root / "docs.idx").read_bytes())
    (tmp_path / "cut.bin").write_bytes((root / "docs.bin").read_bytes()[:-6])
    [line] = failures(str(tmp_path / "cut"))
    assert "cut.bin has" in line and "a truncated copy, or .bin and .idx of different datasets?" in line
    (tmp_path / "junk.idx").write_bytes(b"not an index at all, really")
    (tmp_path / "junk.bin").write_bytes(b"")
    assert failures(str(tmp_path / "junk")) == [f"module.data.path={tmp_path / 'junk'}: junk.idx is not a Megatron "
                                                f"index (no MMIDIDX header)"]
