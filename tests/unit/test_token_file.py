"""A pre-tokenized token file is checked before the run: its size, its length, its ids, and the signature of
the other token width."""
from __future__ import annotations

import numpy as np

from primus_hydra.backends.common.token_file import token_file_failure


def write(tmp_path, ids, dtype: str):
    path = tmp_path / f"tokens.{dtype}"
    np.asarray(ids, dtype=dtype).tofile(path)
    return path


def test_a_good_file_passes(tmp_path):
    assert token_file_failure(write(tmp_path, np.arange(1000) % 500, "uint16"), "uint16", 512, 64) is None


def test_uint32_ids_read_as_uint16_are_recognised(tmp_path):
    path = write(tmp_path, np.arange(1000) % 500 + 1, "uint32")
    assert token_file_failure(path, "uint16", 512, 64) == (
        f"module.data.path={path}: every second uint16 value is 0, the signature of uint32 token ids read as "
        "uint16; set module.data.token_dtype=uint32")


def test_uint16_ids_read_as_uint32_are_recognised(tmp_path):
    path = write(tmp_path, np.arange(1000) % 500 + 1, "uint16")
    line = token_file_failure(path, "uint32", 512, 64)
    assert line.startswith(f"module.data.path={path}: token id ") and line.endswith(
        "(read as uint16 every id fits: set module.data.token_dtype=uint16)")


def test_ids_beyond_the_vocabulary(tmp_path):
    path = write(tmp_path, np.full(1000, 600), "uint16")
    assert token_file_failure(path, "uint16", 512, 64) == (
        f"module.data.path={path}: token id 600 >= model.vocab_size=512 (wrong tokenizer, or model.vocab_size too small)")


def test_a_size_that_is_not_whole_tokens(tmp_path):
    path = tmp_path / "odd.bin"
    path.write_bytes(b"\x01\x02\x03")
    assert "3 bytes is not a whole number of uint16 tokens (2 bytes each)" in token_file_failure(path, "uint16", 512, 8)


def test_a_file_shorter_than_one_sequence(tmp_path):
    path = write(tmp_path, [1, 2, 3], "uint16")
    assert token_file_failure(path, "uint16", 512, 8) == (
        f"module.data.path={path}: 3 tokens is too short for module.seq_length=8 (needs more than 9)")


def test_a_folder_is_not_a_token_file(tmp_path):
    assert token_file_failure(tmp_path, "uint16", 512, 8).endswith(
        "not a file (module.data.source=tokens reads one flat uint16 array)")
