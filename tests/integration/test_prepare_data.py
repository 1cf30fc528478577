"""task=prepare_data end to end: a JSONL corpus of the standard library's docstrings, tokenized by a small BPE
tokenizer built here with `tokenizers` (no download), becomes a Megatron indexed dataset whose documents decode back
to the text, each ended by the eos id; 1 and 2 workers, and the same texts as zstd JSONL, Parquet or a
datasets.save_to_disk folder, write the same bytes. megatron-core's IndexedDataset reads them back; backend=torch,
megatron (its native batches) and torchtitan train on the prefix at once, with the same curve (1e-4 relative).
A rerun of the command is up to date; a malformed line stops the run with file:line and leaves nothing."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.compose import compose_primus, run_job
from helpers.curves import assert_same_curve, losses
from helpers.libraries import needs_megatron_core, needs_torchtitan
from helpers.overrides import SHORT_RUN
from helpers.tiny_tokenizer import EOS, tokenizers_findable, write_tiny_tokenizer

needs_tokenizers = pytest.mark.skipif(not tokenizers_findable(),
                                      reason="tokenizers is not installed (pip install 'primus-hydra[data]')")
pytestmark = [needs_megatron_core, needs_tokenizers]

DOCUMENTED_MODULES = ("json", "textwrap", "string", "shlex", "fractions", "difflib", "heapq", "bisect")
MODEL_VOCAB = 384  # past the tokenizer's ids, a multiple of megatron's vocabulary padding (128)
STEPS = ["module.train_iters=3", "module.warmup_iters=0", "module.weight_decay=0", f"model.vocab_size={MODEL_VOCAB}"]


def docstrings() -> list[str]:
    """Every public docstring of a few standard-library modules, in a fixed order, and one empty document."""
    texts = []
    for name in DOCUMENTED_MODULES:
        module = __import__(name)
        texts += [inspect.getdoc(module) or ""]
        texts += [inspect.getdoc(getattr(module, attr)) for attr in sorted(vars(module)) if not attr.startswith("_")
                  and callable(getattr(module, attr)) and inspect.getdoc(getattr(module, attr))]
    return texts + [""]


def prepare(*overrides: str):
    """task=prepare_data in this process, as the CLI runs it (the job prepared, then run)."""
    from primus_hydra.tasks import run_task

    return run_task(compose_primus("task=prepare_data", *overrides))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("prepare_data")
    texts = docstrings()
    (root / "corpus.jsonl").write_text("".join(json.dumps({"text": text, "n": i}) + "\n" for i, text in enumerate(texts)))
    tokenizer = write_tiny_tokenizer(root / "tokenizer")
    out = root / "out" / "docs"
    stats = prepare(f"task.input={root / 'corpus.jsonl'}", f"task.tokenizer={tokenizer}", f"task.out={out}",
                    "task.workers=1")
    return {"root": root, "texts": texts, "tokenizer": tokenizer, "out": out, "stats": stats,
            "prefix": Path(f"{out}_text_document")}


def files_of(prefix: Path) -> tuple[bytes, bytes]:
    return Path(f"{prefix}.bin").read_bytes(), Path(f"{prefix}.idx").read_bytes()


def test_documents_decode_back_to_the_text_each_ended_by_the_eos_id(corpus):
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(corpus["tokenizer"] / "tokenizer.json"))
    eos = tokenizer.token_to_id(EOS)
    dataset = IndexedDataset(str(corpus["prefix"]))
    bounds = dataset.document_indices
    documents = [[int(t) for s in range(bounds[d], bounds[d + 1]) for t in dataset[s]] for d in range(len(bounds) - 1)]
    assert len(documents) == len(corpus["texts"]) and documents[-1] == []  # the empty one: kept, no eos
    assert all(ids[-1] == eos and eos not in ids[:-1] for ids in documents[:-1])
    assert [tokenizer.decode(ids[:-1]) for ids in documents[:-1]] == corpus["texts"][:-1]
    entry = corpus["stats"]["datasets"]["docs_text_document"]
    assert (entry["documents"], entry["empty_documents"], entry["max_token_id"]) == \
        (len(documents), 1, max(max(ids) for ids in documents[:-1]))
    assert entry["tokens"] == sum(len(ids) for ids in documents) and corpus["stats"]["dtype"] == "uint16"


def test_two_workers_and_every_input_format_write_the_same_bytes(corpus, tmp_path):
    datasets = pytest.importorskip("datasets", reason="a datasets.save_to_disk folder is made with `datasets`")
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    texts, tokenizer = corpus["texts"], corpus["tokenizer"]
    jsonl = (corpus["root"] / "corpus.jsonl").read_bytes()
    (tmp_path / "corpus.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl))
    pq.write_table(pa.table({"text": texts}), tmp_path / "corpus.parquet", row_group_size=100)
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(tmp_path / "saved"))
    inputs = {"workers2": corpus["root"] / "corpus.jsonl", "zstd": tmp_path / "corpus.jsonl.zst",
              "parquet": tmp_path / "corpus.parquet", "saved": tmp_path / "saved"}
    for name, path in inputs.items():
        prepare(f"task.input={path}", f"task.tokenizer={tokenizer}", f"task.out={tmp_path / 'out' / name}",
                "task.workers=2")
        assert files_of(tmp_path / "out" / f"{name}_text_document") == files_of(corpus["prefix"]), name


def test_a_rerun_is_up_to_date_and_a_key_the_first_record_lacks_is_one_line(corpus, tmp_path):
    args = [f"task.input={corpus['root'] / 'corpus.jsonl'}", f"task.tokenizer={corpus['tokenizer']}",
            f"task.out={corpus['out']}"]
    before = sorted(p.name for p in corpus["out"].parent.iterdir())
    rerun = primus("task=prepare_data", *args, cwd=tmp_path)
    assert rerun.returncode == 0 and "are up to date" in rerun.stdout, rerun.stderr[-2000:]
    missing = primus("task=prepare_data", *args[:2], f"task.out={tmp_path / 'new'}", "task.json_keys=[body]",
                     cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        f"error: task.json_keys=['body']: {corpus['root'] / 'corpus.jsonl'}:1 has no key 'body' (its keys: n, text)"]
    assert sorted(p.name for p in corpus["out"].parent.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_malformed_line_stops_the_run_with_its_line_and_leaves_nothing_unless_skipped(corpus, tmp_path):
    from primus_hydra.errors import DataError

    lines = (corpus["root"] / "corpus.jsonl").read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:30] + ['{"text": "cut\n'] + lines[30:]))
    args = [f"task.input={bad}", f"task.tokenizer={corpus['tokenizer']}", f"task.out={tmp_path / 'out' / 'bad'}"]
    with pytest.raises(DataError, match=f"^{bad}:31: not JSON"):
        prepare(*args, "task.workers=2")
    assert list((tmp_path / "out").iterdir()) == []
    stats = prepare(*args, "task.skip_bad_records=true")
    assert stats["bad_records_skipped"] == 1
    assert files_of(tmp_path / "out" / "bad_text_document") == files_of(corpus["prefix"])


def train(run_dir: Path, prefix: Path, *args: str) -> dict[int, float]:
    result = primus(f"hydra.run.dir={run_dir}", *SHORT_RUN, *STEPS, "module.data.source=indexed",
                    f"module.data.path={prefix}", *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return losses(run_dir)


@pytest.fixture(scope="module")
def torch_curve(corpus, tmp_path_factory) -> dict[int, float]:
    run_dir = tmp_path_factory.mktemp("torch") / "run"
    run_job(compose_primus(*SHORT_RUN, *STEPS, "module.data.source=indexed", f"module.data.path={corpus['prefix']}",
                           "backend=torch"), run_dir)
    curve = losses(run_dir)
    assert sorted(curve) == [1, 2, 3]
    return curve


@pytest.mark.slow
def test_megatron_trains_on_the_prefix_with_the_curve_of_backend_torch(corpus, torch_curve, tmp_path):
    assert_same_curve(train(tmp_path / "run", corpus["prefix"], "backend=megatron", "backend.dataset=native"),
                      torch_curve)


@pytest.mark.slow
@needs_torchtitan
def test_torchtitan_trains_on_the_prefix_with_the_curve_of_backend_torch(corpus, torch_curve, tmp_path):
    assert_same_curve(train(tmp_path / "run", corpus["prefix"], "backend=torchtitan"), torch_curve)
