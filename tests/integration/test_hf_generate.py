"""task=generate means what transformers means: on a tiny Hugging Face folder (fp32) it picks exactly the tokens of
transformers' greedy `generate` and its logits agree within 1e-4, for Llama (untied, tied), Qwen3-MoE and
DeepSeek-V3; from a backend=torch run dir it writes generation.json; what cannot work is one line, exit 2, and
no run dir."""
from __future__ import annotations

import json
import shutil

import pytest

from helpers.cli import error_lines, primus, primus_reporting_torch, run_dirs
from helpers.compose import compose_primus, run_job
from helpers.hf_models import BuiltOnDemand, needs_transformers, transformers_greedy
from helpers.hf_models import generate_prepared as prepared
from helpers.overrides import TINY_RUN
from primus_hydra.errors import PrimusError
from primus_hydra.tasks.checkpoint_source import CheckpointSource
from primus_hydra.tasks.generate import eos_token_ids, generate_from_checkpoint

PROMPT = [72, 101, 108, 108, 111, 44, 32, 119]  # "Hello, w"
NEW_TOKENS = 8




@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory):
    """{family: folder}, each tiny model built once for the module (tests that change a folder copy it)."""
    return BuiltOnDemand(tmp_path_factory.mktemp("hf"))


@needs_transformers
@pytest.mark.parametrize("family", ["llama", "llama_tied", "qwen3_moe", "deepseek_v3"])
def test_greedy_tokens_and_logits_are_transformers(hf_folders, family):
    import torch

    folder = hf_folders[family]
    expected_tokens, expected_logits = transformers_greedy(folder, PROMPT, NEW_TOKENS)

    job = prepared(f"task.checkpoint={folder}", f"task.prompt_tokens={PROMPT}", f"task.max_new_tokens={NEW_TOKENS}",
                   "task.save_logits=true")
    result = generate_from_checkpoint(job)

    assert result.tokens == expected_tokens
    torch.testing.assert_close(torch.stack(result.logits), torch.stack(expected_logits), atol=1e-4, rtol=0)


@needs_transformers
def test_the_command_prints_the_text_and_writes_generation_json(hf_folders, tmp_path):
    folder = hf_folders["llama"]
    expected_tokens, _ = transformers_greedy(folder, list(b"Hi"), 3)

    result = primus("task=generate", f"task.checkpoint={folder}", "task.prompt=Hi", "task.max_new_tokens=3",
                    "task.save_logits=true", f"hydra.run.dir={tmp_path / 'gen'}", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "gen" / "generation.json").read_text())
    assert record["prompt_tokens"] == list(b"Hi") and record["tokens"] == expected_tokens
    assert len(record["logits"]) == 3 and len(record["logits"][0]) == 256
    assert result.stdout.splitlines()[-1].startswith("Hi")


def test_a_backend_torch_run_dir_generates(tmp_path):
    """The run dir as task.checkpoint, trained and asked in process (the command itself is the test above's)."""
    run_job(compose_primus("model=llama_tiny", "backend=torch", *TINY_RUN, "module.checkpoint.save_final=true"),
            tmp_path / "run")

    job = prepared(f"task.checkpoint={tmp_path / 'run'}", "task.prompt_tokens=[100,101,102]", "task.max_new_tokens=4")
    result = generate_from_checkpoint(job)

    assert job.prompt_tokens == [100, 101, 102] and len(result.tokens) == 4
    assert all(0 <= token < 256 for token in result.tokens) and not result.logits


@pytest.mark.parametrize("overrides, expected", [
    (["task.prompt=hi"], "task.checkpoint=null: give the model to ask"),
    (["task.checkpoint=/no/such/dir", "task.prompt=hi"], "task.checkpoint=/no/such/dir: no such file or folder"),
    (["task.checkpoint=.", "task.prompt=hi", "task.prompt_tokens=[1]"], "task.prompt / task.prompt_tokens: both are set"),
    (["task.checkpoint=."], "task.prompt / task.prompt_tokens: neither is set"),
    (["task.checkpoint=.", "task.prompt=hi", "task.max_new_tokens=0"], "task.max_new_tokens=0: must be at least 1"),
    (["task.checkpoint=.", "task.prompt=hi", "task.top_p=0"], "task.top_p=0.0: must be in (0, 1]"),
])
def test_settings_that_cannot_work_are_one_line_each(overrides, expected):
    with pytest.raises(PrimusError) as info:
        prepared(*overrides)
    assert str(info.value).startswith(expected)
    assert "\n" not in str(info.value)


@needs_transformers
def test_a_token_past_the_vocabulary_is_one_line_exit_2_no_torch_and_no_run_dir(hf_folders, tmp_path):
    folder = hf_folders["llama"]

    result, imported_torch = primus_reporting_torch("task=generate", f"task.checkpoint={folder}",
                                                    "task.prompt_tokens=[1,256]", cwd=tmp_path)

    assert result.returncode == 2 and not imported_torch
    assert error_lines(result.stderr) == [
        f"error: task.prompt_tokens: token id 256 is outside the model's vocabulary (0 .. 255, vocab_size=256 in "
        f"task.checkpoint={folder})"]
    assert run_dirs(tmp_path) == []


@needs_transformers
def test_text_goes_through_the_folders_tokenizer_and_its_eos_token_stops(hf_folders, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = shutil.copytree(hf_folders["llama"], tmp_path / "llama")
    greedy, _ = transformers_greedy(folder, [5, 7], 3)
    assert greedy[1] not in (0, 5, 7)  # the tiny model's second greedy token: the tokenizer's end token below
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 5, "world": 7, "<end>": greedy[1]}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<end>"}))

    job = prepared(f"task.checkpoint={folder}", "task.prompt=hello world", "task.max_new_tokens=3")
    result = generate_from_checkpoint(job)

    assert job.prompt_tokens == [5, 7] and job.eos_token_ids == [greedy[1]]
    assert result.tokens == greedy[:2] and result.stopped_at_eos


@needs_transformers
def test_bf16_weights_generate_with_the_same_machinery(hf_folders):
    folder = hf_folders["llama"]

    job = prepared(f"task.checkpoint={folder}", f"task.prompt_tokens={PROMPT}", "task.max_new_tokens=4",
                   "task.dtype=bf16", "task.temperature=0.8", "task.top_p=0.9", "task.seed=7", "task.save_logits=true")
    first, again = generate_from_checkpoint(job), generate_from_checkpoint(job)

    assert len(first.tokens) == 4 and first.tokens == again.tokens
    assert all(logits.dtype.is_floating_point and logits.shape == (256,) for logits in first.logits)


def test_eos_ids_come_from_generation_config_before_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 3]}))
    source = CheckpointSource(str(tmp_path), model=None, hf_folder=tmp_path)

    assert eos_token_ids(source, None) == [2, 3]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": None}))
    assert eos_token_ids(source, None) == [1]
