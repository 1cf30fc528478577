"""module.data.tokenizer: every backend that trains reads text through a Hugging Face tokenizer folder (a small
byte-level BPE built here with the `tokenizers` library). From the same seed backend=torch, megatron's core trainer
(backend.dataset=native) and torchtitan see the same batches: the same loss at steps 1 and 2 (1e-4 relative, fp32).
megatron's own dataset (backend.dataset=megatron) holds the tokenizer's ids, each file ended by the eos id, and
task=generate on the run encodes and decodes with the run's tokenizer. What the
tokenizer cannot do for the job is one line each, exit 2, before torch is imported, nothing written."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.cli import primus, primus_reporting_torch
from helpers.compose import compose_primus, run_job
from helpers.curves import assert_same_curve, losses
from helpers.libraries import needs_megatron_core, needs_torchtitan
from helpers.overrides import SHORT_RUN
from helpers.tiny_tokenizer import TINY_TOKENIZER_IDS, tokenizers_findable, write_tiny_tokenizer

needs_tokenizers = pytest.mark.skipif(not tokenizers_findable(),
                                      reason="tokenizers is not installed (pip install 'primus-hydra[hf]')")
pytestmark = [pytest.mark.slow, needs_tokenizers]

MODEL_VOCAB = 384  # past the tokenizer's TINY_TOKENIZER_IDS, a multiple of megatron's vocabulary padding (128)
STEPS = ["module.train_iters=2", "module.warmup_iters=0", "module.weight_decay=0", f"model.vocab_size={MODEL_VOCAB}"]


@pytest.fixture(scope="module")
def tokenized_text(tmp_path_factory) -> list[str]:
    """The overrides that train on a few small Python files through the tiny tokenizer."""
    root = tmp_path_factory.mktemp("tokenized")
    folder = write_tiny_tokenizer(root / "tokenizer")
    text = root / "text"
    text.mkdir()
    for index in range(4):
        body = "".join(f"def read_lines_{index}_{n}(path):\n    with open(path) as handle:\n        return "
                       f"[line.rstrip() for line in handle][{n}:]\n\n" for n in range(60))
        (text / f"module_{index}.py").write_text(body)
    return [f"module.data.path={text}", f"module.data.tokenizer={folder}"]


def train(run_dir: Path, data: list[str], *args: str) -> dict[int, float]:
    """step -> loss of a two-step run (the first step's loss tells the first batch apart: ~0.03 between batches)."""
    result = primus(f"hydra.run.dir={run_dir}", *SHORT_RUN, *STEPS, *data, *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    curve = losses(run_dir)
    assert sorted(curve) == [1, 2]
    return curve


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory, tokenized_text) -> Path:
    """A backend=torch run through the tokenizer, its last step saved (in this process: the other backends' runs
    are the command's)."""
    run_dir = tmp_path_factory.mktemp("torch") / "run"
    run_job(compose_primus(*SHORT_RUN, *STEPS, *tokenized_text, "backend=torch", "module.checkpoint.save_final=true"),
            run_dir)
    assert sorted(losses(run_dir)) == [1, 2]
    return run_dir


@pytest.fixture(scope="module")
def torch_curve(torch_run) -> dict[int, float]:
    return losses(torch_run)


def test_task_generate_on_the_run_encodes_and_decodes_with_its_tokenizer(tokenized_text, torch_run):
    """In this process: the job's prompt ids and the text it decodes (the command itself: test_hf_generate.py)."""
    from tokenizers import Tokenizer

    from primus_hydra.tasks.generate import GenerateTask, decode, generate_from_checkpoint

    tokenizer = Tokenizer.from_file(str(Path(tokenized_text[1].split("=", 1)[1]) / "tokenizer.json"))
    job = GenerateTask.prepare_job(compose_primus("task=generate", f"task.checkpoint={torch_run}",
                                                  "task.prompt='def read_lines(path):'", "task.max_new_tokens=4"), None)
    tokens = generate_from_checkpoint(job).tokens
    assert job.prompt_tokens == tokenizer.encode("def read_lines(path):").ids and len(tokens) == 4
    assert decode(tokens, job.tokenizer_file) == tokenizer.decode(tokens)


@needs_megatron_core
def test_megatron_sees_the_batches_backend_torch_sees(tmp_path, tokenized_text, torch_curve):
    assert_same_curve(train(tmp_path / "run", tokenized_text, "backend=megatron", "backend.dataset=native"),
                      torch_curve)


@needs_torchtitan
def test_torchtitan_sees_the_batches_backend_torch_sees(tmp_path, tokenized_text, torch_curve):
    run_dir = tmp_path / "run"
    assert_same_curve(train(run_dir, tokenized_text, "backend=torchtitan"), torch_curve)
    assert not (run_dir / ".primus" / "tokenizer").exists()  # torchtitan's own tokenizer is the data's folder


@needs_megatron_core
def test_megatrons_own_dataset_holds_the_tokenizers_ids(tmp_path, tokenized_text):
    import numpy as np

    from primus_hydra.backends.common.data import text_documents
    from primus_hydra.backends.common.indexed_file import read_index
    from primus_hydra.backends.megatron.datasets import text_prefix

    run_dir = tmp_path / "run"
    train(run_dir, tokenized_text, "backend=megatron", "backend.dataset=megatron")
    path, tokenizer = (override.split("=", 1)[1] for override in tokenized_text)
    expected = np.concatenate(text_documents(path, tokenizer=tokenizer))
    np.testing.assert_array_equal(read_index(str(text_prefix(run_dir))).tokens(), expected)
    assert expected.max() < TINY_TOKENIZER_IDS


BAD_TOKENIZERS = {
    "past_the_embedding": (lambda root: write_tiny_tokenizer(root / "tok"), [],
                           f"the tokenizer's ids reach {TINY_TOKENIZER_IDS - 1} ({TINY_TOKENIZER_IDS} tokens with its "
                           f"added special tokens), past model.vocab_size=256: a token id can reach past the embedding"),
    "not_text": (lambda root: write_tiny_tokenizer(root / "tok"), ["module.data.source=mock"],
                 "a tokenizer applies only to module.data.source=text"),
}


# each case's line is data_source_failures' (tests/unit/test_text_tokenizer.py), which every backend's adapter calls;
# from the command line one case on backend=torch and one on another backend show it runs before any worker
BAD_CASES = [("torch", "past_the_embedding"), pytest.param("torchtitan", "not_text", marks=needs_torchtitan)]


@pytest.mark.parametrize("backend, case", BAD_CASES)
def test_what_the_tokenizer_cannot_do_is_one_line_before_any_worker(tmp_path, backend, case):
    make, extra, expected = BAD_TOKENIZERS[case]
    folder = make(tmp_path)
    result, torch_imported = primus_reporting_torch(f"backend={backend}", "model=llama_tiny", "module.train_iters=2",
                                                    f"module.data.tokenizer={folder}", *extra, cwd=tmp_path,
                                                    env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: module.data.tokenizer={folder}: "), result.stderr[-2000:]
    assert expected in errors[0]
    assert not torch_imported and not (tmp_path / "out").exists()
