"""module.data.tokenizer: a Hugging Face tokenizer folder tokenizes text data in place of the byte-level default.
Before launch its folder, its tokenizer.json and its size against model.vocab_size are one line each, read from the
JSON alone; in the workers the `tokenizers` library tokenizes each text file, ended by the eos id."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers.tiny_tokenizer import EOS, TINY_TOKENIZER_IDS, tokenizers_findable, write_tiny_tokenizer
from primus_hydra.backends.common.data_sources import data_source_failures
from primus_hydra.backends.common.text_tokenizer import (
    eos_token,
    load_tokenizer,
    token_id_count,
    tokenize_documents,
    tokenizer_key_failures,
)
from primus_hydra.errors import ConfigValidationError, DataError

needs_tokenizers = pytest.mark.skipif(not tokenizers_findable(),
                                      reason="tokenizers is not installed (pip install 'primus-hydra[hf]')")


def write_json(path: Path, document) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def test_the_id_count_is_the_largest_id_plus_one_with_added_tokens(tmp_path):
    file = write_json(tmp_path / "tokenizer.json", {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 7}},
                                                    "added_tokens": [{"id": 9, "content": "</s>"}]})
    assert token_id_count(file) == 10


def test_a_unigram_vocabulary_counts_its_pieces(tmp_path):
    file = write_json(tmp_path / "tokenizer.json", {"model": {"type": "Unigram", "vocab": [["a", -1.0], ["b", -2.0]]}})
    assert token_id_count(file) == 2


def test_a_missing_folder_is_one_line(tmp_path):
    assert tokenizer_key_failures(tmp_path / "nope", 256) == [
        f"module.data.tokenizer={tmp_path / 'nope'}: no such folder (give a Hugging Face tokenizer folder holding "
        f"tokenizer.json)"]


def test_a_folder_without_tokenizer_json_is_one_line(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"sentencepiece")
    assert tokenizer_key_failures(tmp_path, 256) == [
        f"module.data.tokenizer={tmp_path}: the folder holds no tokenizer.json (a Hugging Face fast tokenizer's file; "
        f"a slow tokenizer's files alone are not read)"]


def test_a_tokenizer_json_that_is_not_json_is_one_line(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": ')
    [line] = tokenizer_key_failures(tmp_path, 256)
    assert line.startswith(f"module.data.tokenizer={tmp_path}: {tmp_path / 'tokenizer.json'} is not a tokenizer the "
                           f"`tokenizers` library reads (not JSON: ")
    assert "\n" not in line


def test_a_tokenizer_json_without_a_vocabulary_is_one_line(tmp_path):
    write_json(tmp_path / "tokenizer.json", {"model": {"type": "BPE"}})
    assert tokenizer_key_failures(tmp_path, 256) == [
        f"module.data.tokenizer={tmp_path}: {tmp_path / 'tokenizer.json'} is not a tokenizer the `tokenizers` library "
        f"reads (no model.vocab of token ids)"]


def test_a_model_type_the_library_lacks_is_one_line(tmp_path):
    write_json(tmp_path / "tokenizer.json", {"model": {"type": "Nonsense", "vocab": {"a": 0}}})
    assert tokenizer_key_failures(tmp_path, 256) == [
        f"module.data.tokenizer={tmp_path}: {tmp_path / 'tokenizer.json'} is not a tokenizer the `tokenizers` library "
        f"reads (model.type='Nonsense'; the library's models are BPE, Unigram, WordLevel, WordPiece)"]


def test_a_vocabulary_past_the_embedding_names_both_sizes(tmp_path):
    write_json(tmp_path / "tokenizer.json", {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}},
                                             "added_tokens": [{"id": 256, "content": "</s>"}]})
    assert tokenizer_key_failures(tmp_path, 256) == [
        f"module.data.tokenizer={tmp_path}: the tokenizer's ids reach 256 (257 tokens with its added special tokens), "
        f"past model.vocab_size=256: a token id can reach past the embedding; set model.vocab_size=257 or more, or "
        f"use a tokenizer of at most 256 tokens"]


def test_a_vocabulary_that_fits_passes(tmp_path):
    write_json(tmp_path / "tokenizer.json", {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 255}}})
    assert tokenizer_key_failures(tmp_path, 256) == []


def test_the_eos_token_comes_from_tokenizer_config_else_special_tokens_map(tmp_path):
    write_json(tmp_path / "special_tokens_map.json", {"eos_token": {"content": "<|end|>", "lstrip": False}})
    assert eos_token(tmp_path) == "<|end|>"
    write_json(tmp_path / "tokenizer_config.json", {"eos_token": "</s>"})
    assert eos_token(tmp_path) == "</s>"


def test_a_tokenizer_on_token_ids_is_refused_before_launch(compose_config, tmp_path):
    cfg = compose_config("module.data.source=mock", f"module.data.tokenizer={tmp_path}")
    assert data_source_failures(cfg, blends=False) == [
        f"module.data.tokenizer={tmp_path}: a tokenizer applies only to module.data.source=text (source=mock is "
        f"token ids already); unset module.data.tokenizer"]


def test_the_default_text_is_checked_against_the_tokenizer_too(compose_config, tmp_path):
    """module.data.path=null (Python's stdlib) still has its tokenizer checked."""
    write_json(tmp_path / "tokenizer.json", {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 300}}})
    cfg = compose_config("model=llama_tiny", "module.data.source=text", f"module.data.tokenizer={tmp_path}")
    [line] = data_source_failures(cfg, blends=False)
    assert "a token id can reach past the embedding" in line and "model.vocab_size=256" in line


@needs_tokenizers
def test_each_text_becomes_the_librarys_ids_ended_by_eos(tmp_path):
    from tokenizers import Tokenizer

    folder = write_tiny_tokenizer(tmp_path / "tok")
    library = Tokenizer.from_file(str(folder / "tokenizer.json"))
    eos_id = library.token_to_id(EOS)
    texts = ["def parse(text):\n    return text\n", "class Reader: pass  # é"]
    documents = tokenize_documents(folder, [text.encode("utf-8") for text in texts])
    assert [document.tolist() for document in documents] == [library.encode(text).ids + [eos_id] for text in texts]
    assert all(document.max() < TINY_TOKENIZER_IDS for document in documents)


@needs_tokenizers
def test_without_an_eos_token_texts_are_not_ended(tmp_path):
    folder = write_tiny_tokenizer(tmp_path / "tok", eos=False)
    [document] = tokenize_documents(folder, [b"return self.values"])
    from tokenizers import Tokenizer

    assert document.tolist() == Tokenizer.from_file(str(folder / "tokenizer.json")).encode("return self.values").ids


@needs_tokenizers
def test_text_batches_read_the_tokenizers_ids(tmp_path):
    from primus_hydra.backends.common.data import TokenBatches, text_documents

    folder = write_tiny_tokenizer(tmp_path / "tok")
    text = tmp_path / "text"
    for index in range(3):
        (text / f"{index}.py").parent.mkdir(exist_ok=True)
        (text / f"{index}.py").write_text(f"def read_lines_{index}(path):\n    return [line for line in path]\n" * 20)
    batches = TokenBatches("text", str(text), "uint16", TINY_TOKENIZER_IDS, 16, seed=0, tokenizer=str(folder))
    assert np.array_equal(batches.tokens, np.concatenate(text_documents(str(text), tokenizer=str(folder))))
    from tokenizers import Tokenizer

    eos_id = Tokenizer.from_file(str(folder / "tokenizer.json")).token_to_id(EOS)
    assert int((batches.tokens == eos_id).sum()) == 3  # one after each file
    inputs, targets = batches.batch(0, 0, 2)
    assert inputs.shape == (2, 16) and np.array_equal(inputs[:, 1:], targets[:, :-1])


@needs_tokenizers
def test_a_file_the_library_cannot_read_is_one_line(tmp_path):
    write_json(tmp_path / "tokenizer.json", {"model": {"type": "Nonsense", "vocab": {"a": 0}}})
    with pytest.raises(DataError) as raised:
        load_tokenizer(tmp_path / "tokenizer.json")
    assert str(raised.value).startswith(f"{tmp_path / 'tokenizer.json'}: not a tokenizer the `tokenizers` library "
                                        f"reads (")
    assert "\n" not in str(raised.value)


def test_torchtitans_own_tokenizer_is_the_datas_folder(compose_config, tmp_path):
    from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config
    from primus_hydra.config.layout import parallel_layout

    cfg = compose_config("backend=torchtitan", "model=llama_tiny", f"module.data.tokenizer={tmp_path}")
    job = build_torchtitan_job_config(cfg, tmp_path / "run", parallel_layout(cfg, 1))
    assert job["model"]["hf_assets_path"] == str(tmp_path)


def test_a_vocabulary_below_256_is_allowed_with_a_tokenizer_that_fits(compose_config, tmp_path):
    from primus_hydra.config.validate import validate_config

    write_json(tmp_path / "tokenizer.json", {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 127}}})
    cfg = compose_config("model=llama_tiny", "model.vocab_size=128", f"module.data.tokenizer={tmp_path}")
    validate_config(cfg)  # no ConfigValidationError: byte tokens are not read
    assert data_source_failures(cfg, blends=False) == []
    with pytest.raises(ConfigValidationError, match="uses byte tokens and needs >= 256"):
        validate_config(compose_config("model=llama_tiny", "model.vocab_size=128"))
