"""task.split_sentences=true: nltk's Punkt (its punkt_tab data, here a small set written by the test: the
abbreviations it must not end a sentence at) cuts each text into sentences, each a sequence of its document, written
as Megatron-LM's --split-sentences names them; 1 and 2 workers write the same bytes; missing data is one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.compose import compose_primus
from primus_hydra.errors import ConfigValidationError

nltk = pytest.importorskip("nltk")

TEXTS = ["Dr. Smith went home. He slept.\nThe end.", "One sentence only", "e.g. this one. And this."]


@pytest.fixture
def punkt(tmp_path, monkeypatch) -> Path:
    english = tmp_path / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    english.mkdir(parents=True)
    (english / "abbrev_types.txt").write_text("dr\ne.g\n")
    for name in ("collocations.tab", "sent_starters.txt", "ortho_context.tab"):
        (english / name).write_text("")
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "nltk_data"))  # pool workers read it when they import nltk
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data"), *nltk.data.path])
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    return source


def prepare(*overrides: str):
    from primus_hydra.tasks import run_task

    return run_task(compose_primus("task=prepare_data", "task.tokenizer=byte", "task.split_sentences=true", *overrides))


def sentences_of(prefix: Path) -> list[list[str]]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(prefix))
    bounds = list(dataset.document_indices)
    text = [bytes(int(i) for i in dataset[n] if i < 256).decode() for n in range(len(dataset))]
    assert all(dataset[bounds[d + 1] - 1][-1] == 256 for d in range(len(bounds) - 1))  # eod after the last one
    return [text[bounds[d]: bounds[d + 1]] for d in range(len(bounds) - 1)]


def test_each_sentence_is_a_sequence_of_its_document_and_workers_do_not_change_the_bytes(punkt, tmp_path):
    prepare(f"task.input={punkt}", f"task.out={tmp_path / 'one' / 'c'}", "task.workers=1")
    assert sentences_of(tmp_path / "one" / "c_text_sentence") == [
        ["Dr. Smith went home.", "He slept.", "The end."], ["One sentence only"], ["e.g. this one.", "And this."]]
    prepare(f"task.input={punkt}", f"task.out={tmp_path / 'two' / 'c'}", "task.workers=2")
    for suffix in (".bin", ".idx"):
        assert (tmp_path / "one" / f"c_text_sentence{suffix}").read_bytes() == \
            (tmp_path / "two" / f"c_text_sentence{suffix}").read_bytes()
    assert not list((tmp_path / "one").glob("*_document*"))


def test_keep_newlines_keeps_the_whitespace_after_each_sentence(punkt, tmp_path):
    prepare(f"task.input={punkt}", f"task.out={tmp_path / 'kept' / 'c'}", "task.workers=1", "task.keep_newlines=true")
    documents = sentences_of(tmp_path / "kept" / "c_text_sentence")
    assert documents[0] == ["Dr. Smith went home. ", "He slept.\n", "The end."]
    assert ["".join(document) for document in documents] == TEXTS


def test_without_punkt_data_or_with_a_conversation_format_it_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"text": "a. b."}) + "\n")
    with pytest.raises(ConfigValidationError) as raised:
        prepare(f"task.input={source}", f"task.out={tmp_path / 'c'}", "task.lang=german")
    assert raised.value.failures == [
        "task.split_sentences=true: nltk has no Punkt data for task.lang=german (run: python -m nltk.downloader "
        "punkt_tab, or point NLTK_DATA at a folder holding tokenizers/punkt_tab/german)"]
    with pytest.raises(ConfigValidationError) as raised:
        prepare(f"task.input={source}", f"task.out={tmp_path / 'c'}", "task.format=chat")
    assert raised.value.failures[0] == ("task.split_sentences=true: task.format=chat reads whole conversations; "
                                        "leave task.split_sentences unset")
    assert not list(tmp_path.glob("c_*"))


def test_a_worker_that_cannot_start_stops_the_run_with_its_error_instead_of_hanging(tmp_path):
    """A pool whose initializer raises starts new workers for ever; the failure must reach the writer."""
    from primus_hydra.tasks.data_prep.encode import encode_chunk, start_pool_worker
    from primus_hydra.tasks.data_prep.inputs import Chunk
    from primus_hydra.tasks.data_prep.sentences import SentenceSplit
    from primus_hydra.tasks.data_prep.tokenizer import BYTE, TokenizerSpec
    from primus_hydra.tasks.data_prep.write import _worker_context

    spec = TokenizerSpec(BYTE, None, 256, 256, "")
    no_punkt = SentenceSplit("english", False, str(tmp_path / "missing"))
    with _worker_context().Pool(1, initializer=start_pool_worker, initargs=(spec, ["text"], True, None, no_punkt)) \
            as pool:
        with pytest.raises(FileNotFoundError, match="missing"):
            pool.apply_async(encode_chunk, (Chunk(0, "jsonl", [(1, '{"text": "a. b."}')]),)).get(timeout=120)
