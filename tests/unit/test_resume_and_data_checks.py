"""What the step-loop backends (torch, megatron's core trainer, torchtitan) refuse when the job is prepared, before a
worker starts: a checkpoint to resume that another backend or model wrote, a checkpoint path that names none, a text
source too short or empty, blend weights that are not finite numbers, and backend.extra_args values of another type
than the backend declares. The step folders here are written by hand (a meta.json is all the checks read); the CLI
runs on real checkpoints are tests/integration/test_backend_resume_refusals.py."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pytest

from helpers.libraries import needs_megatron_core, needs_torchtitan
from primus_hydra.backends.base import load_adapter
from primus_hydra.backends.common.data_sources import binary_text_warning, data_source_failures
from primus_hydra.backends.common.indexed_file import IndexedFileError, parse_blend
from primus_hydra.backends.common.run_dir_checks import existing_run_failures
from primus_hydra.backends.extra_args_types import type_failure
from primus_hydra.config.layout import parallel_layout
from primus_hydra.config.model_math import count_parameters

STEP_LOOP = ["torch", pytest.param("megatron", marks=needs_megatron_core),
             pytest.param("torchtitan", marks=needs_torchtitan)]


def write_step(root: Path, step: int, backend: str, model: str = "llama_tiny", parameters: Optional[int] = None) -> Path:
    """A complete step folder as the trainers write it, as far as the checks read it: meta.json and its files
    (parameters=None: a checkpoint older than the parameter count in its meta)."""
    path = root / f"step_{step:07d}"
    path.mkdir(parents=True)
    (path / "trainer_state.pt").write_bytes(b"x")
    meta = {"model": model, "backend": backend, "step": step, "files": {"trainer_state.pt": {"size": 1, "rank": 0}}}
    if parameters is not None:
        meta["parameters"] = parameters
    (path / "meta.json").write_text(json.dumps(meta))
    (root / "latest").write_text(path.name)
    return path


def adapter_for(compose_config, run_dir: Path, backend: str, *overrides: str):
    cfg = compose_config(f"backend={backend}", "module.data.source=mock", *overrides)
    return load_adapter(cfg, parallel_layout(cfg, 1), run_dir)


def failures_of(compose_config, run_dir: Path, backend: str, *overrides: str) -> list[str]:
    adapter = adapter_for(compose_config, run_dir, backend, *overrides)
    return existing_run_failures(adapter.cfg, run_dir, adapter.checkpoint_dir(), backend)


# -- resume: only the backend and the model that wrote the checkpoint ---------------------------------------------
@pytest.mark.parametrize("backend", STEP_LOOP)
def test_resume_auto_refuses_a_run_dir_another_backend_wrote(compose_config, tmp_path, backend):
    writer = "torchtitan" if backend == "megatron" else "megatron"
    step = write_step(tmp_path / "checkpoints", 2, writer)
    assert failures_of(compose_config, tmp_path, backend, "module.checkpoint.resume=auto") == [
        f"module.checkpoint.resume=auto: {step} was written by backend={writer}; backend={backend} resumes only its "
        f"own checkpoints: resume with backend={writer}, or start from its weights in another hydra.run.dir with "
        f"module.checkpoint.load={step}"]


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_resume_of_a_path_refuses_a_step_another_backend_wrote(compose_config, tmp_path, backend):
    step = write_step(tmp_path / "elsewhere", 2, "other" if backend == "torch" else "torch")
    writer = "other" if backend == "torch" else "torch"
    assert failures_of(compose_config, tmp_path / "run", backend, f"module.checkpoint.resume={step}") == [
        f"module.checkpoint.resume={step}: the step was written by backend={writer}; backend={backend} resumes only "
        f"its own checkpoints: resume with backend={writer}, or start from its weights in another hydra.run.dir with "
        f"module.checkpoint.load={step}"]


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_resume_auto_refuses_a_checkpoint_of_another_model(compose_config, tmp_path, backend):
    step = write_step(tmp_path / "checkpoints", 2, backend, model="moe_tiny")
    assert failures_of(compose_config, tmp_path, backend, "module.checkpoint.resume=auto") == [
        f"module.checkpoint.resume=auto: {step} was written for model=moe_tiny, this run builds model=llama_tiny: "
        f"resume with model=moe_tiny, or choose another hydra.run.dir or module.checkpoint.dir for this model"]


def test_resume_of_a_path_of_another_model_asks_for_a_checkpoint_of_this_one(compose_config, tmp_path):
    root = tmp_path / "elsewhere"
    write_step(root, 2, "torch", model="moe_tiny")
    assert failures_of(compose_config, tmp_path / "run", "torch", f"module.checkpoint.resume={root}") == [
        f"module.checkpoint.resume={root}: {root / 'step_0000002'} was written for model=moe_tiny, this run builds "
        f"model=llama_tiny: resume with model=moe_tiny, or name a checkpoint of this model"]


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_resume_auto_of_a_model_changed_since_is_refused(compose_config, tmp_path, backend):
    tiny = count_parameters(compose_config("model=llama_tiny").model)
    step = write_step(tmp_path / "checkpoints", 2, backend, parameters=tiny)
    smaller = count_parameters(compose_config("model=llama_tiny", "model.num_layers=2").model)
    assert failures_of(compose_config, tmp_path, backend, "model.num_layers=2", "module.checkpoint.resume=auto") == [
        f"module.checkpoint.resume=auto: {step} was written for model=llama_tiny with {tiny:,} parameters, this run's "
        f"has {smaller:,} (a model.* value changed): resume with the model it was written for, or choose another "
        f"hydra.run.dir or module.checkpoint.dir for this model"]


@pytest.mark.parametrize("backend", STEP_LOOP)
@pytest.mark.parametrize("parameters", [None, "same"], ids=["older_meta", "recorded"])
def test_resume_auto_of_its_own_backend_and_model_is_accepted(compose_config, tmp_path, backend, parameters):
    count = count_parameters(compose_config("model=llama_tiny").model) if parameters else None
    write_step(tmp_path / "checkpoints", 2, backend, parameters=count)
    assert failures_of(compose_config, tmp_path, backend, "module.checkpoint.resume=auto") == []


def test_resume_auto_reads_the_newest_step_whose_meta_reads(compose_config, tmp_path):
    write_step(tmp_path / "checkpoints", 2, "megatron")
    newest = write_step(tmp_path / "checkpoints", 4, "megatron")
    (newest / "meta.json").write_text("{")  # the trainer moves it aside and resumes step 2: that one is checked
    assert failures_of(compose_config, tmp_path, "torch", "module.checkpoint.resume=auto")[0].startswith(
        f"module.checkpoint.resume=auto: {tmp_path / 'checkpoints' / 'step_0000002'} was written by backend=megatron")


def test_a_corrupt_meta_of_a_named_step_is_one_line_naming_the_key(compose_config, tmp_path):
    step = write_step(tmp_path / "elsewhere", 2, "torch")
    (step / "meta.json").write_text("[]")
    assert failures_of(compose_config, tmp_path / "run", "torch", f"module.checkpoint.resume={step}") == [
        f"module.checkpoint.resume={step}: {step / 'meta.json'} is corrupt: not a checkpoint's meta.json (an object "
        f"with an integer `step` and `files` listing trainer_state.pt)"]


# -- load: weights of any step-loop backend; another model is a warning ----------------------------------------------
@pytest.mark.parametrize("backend", STEP_LOOP)
@pytest.mark.parametrize("writer", ["torch", "megatron", "torchtitan"])
def test_load_takes_the_weights_of_every_step_loop_backend(compose_config, tmp_path, backend, writer):
    step = write_step(tmp_path / "elsewhere", 2, writer)
    assert failures_of(compose_config, tmp_path / "run", backend, f"module.checkpoint.load={step}") == []


def test_load_refuses_a_step_of_a_backend_it_cannot_convert(compose_config, tmp_path):
    step = write_step(tmp_path / "elsewhere", 2, "maxtext")
    assert failures_of(compose_config, tmp_path / "run", "torch", f"module.checkpoint.load={step}") == [
        f"module.checkpoint.load={step}: the step was written by backend=maxtext; backend=torch starts from the "
        f"weights of torch, megatron, torchtitan checkpoints"]


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_load_refuses_weights_of_another_size(compose_config, tmp_path, backend):
    moe = count_parameters(compose_config("model=moe_tiny").model)
    step = write_step(tmp_path / "elsewhere", 2, "megatron", model="moe_tiny", parameters=moe)
    tiny = count_parameters(compose_config("model=llama_tiny").model)
    assert failures_of(compose_config, tmp_path / "run", backend, f"module.checkpoint.load={step}") == [
        f"module.checkpoint.load={step}: the step holds the weights of model=moe_tiny ({moe:,} parameters); this run "
        f"builds model=llama_tiny with {tiny:,}: they cannot load into it"]


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_load_of_a_folder_that_is_no_checkpoint_is_refused(compose_config, tmp_path, backend):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "notes.txt").write_text("not a checkpoint")
    assert failures_of(compose_config, tmp_path / "run", backend, f"module.checkpoint.load={garbage}") == [
        f"module.checkpoint.load={garbage}: not a checkpoint (no meta.json and no `latest` inside)"]


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_load_of_weights_of_another_name_but_the_same_size_is_a_warning(compose_config, tmp_path, backend):
    step = write_step(tmp_path / "elsewhere", 2, "torch", model="llama_tiny_copy",
                      parameters=count_parameters(compose_config("model=llama_tiny").model))
    adapter = adapter_for(compose_config, tmp_path / "run", backend, f"module.checkpoint.load={step}")
    assert f"module.checkpoint.load={step}: the step was written for model=llama_tiny_copy, this run builds " \
           f"model=llama_tiny; its weights load only if every tensor's shape matches" in adapter.warnings()
    assert existing_run_failures(adapter.cfg, tmp_path / "run", adapter.checkpoint_dir(), backend) == []


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_a_fresh_start_over_earlier_checkpoints_is_refused_for_every_backend(compose_config, tmp_path, backend):
    write_step(tmp_path / "checkpoints", 2, backend)
    assert failures_of(compose_config, tmp_path, backend) == [
        f"module.checkpoint.dir={tmp_path / 'checkpoints'} already holds checkpoints (step 2); set "
        f"module.checkpoint.resume=auto to continue from them, or choose another dir"]


# -- data: one rule for every backend --------------------------------------------------------------------------------
def text_config(compose_config, path: Path, *overrides: str):
    return compose_config("module.data.source=text", f"module.data.path={path}", "module.seq_length=32", *overrides)


def test_text_of_two_bytes_is_too_short(compose_config, tmp_path):
    (tmp_path / "two.txt").write_bytes(b"hi")
    assert data_source_failures(text_config(compose_config, tmp_path / "two.txt"), blends=False) == [
        f"module.data.path={tmp_path / 'two.txt'}: 2 byte tokens is too short for module.seq_length=32 (needs more "
        f"than 33)"]


def test_an_empty_text_file_is_called_an_empty_file(compose_config, tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert data_source_failures(text_config(compose_config, tmp_path / "empty.txt"), blends=False) == [
        f"module.data.path={tmp_path / 'empty.txt'}: the file is empty (module.data.source=text trains on the bytes "
        f"of text files)"]


def test_a_folder_of_empty_text_files_holds_no_text(compose_config, tmp_path):
    (tmp_path / "a.txt").write_bytes(b"")
    assert data_source_failures(text_config(compose_config, tmp_path), blends=False) == [
        f"module.data.path={tmp_path}: no text found (looked for non-empty .c, .cfg, .h, .json, .md, .py, .rst, .toml, "
        f".txt, .yaml, .yml files in the folder)"]


@pytest.mark.parametrize("backend", STEP_LOOP)
def test_every_backend_refuses_the_same_short_text_before_training(compose_config, tmp_path, backend):
    (tmp_path / "two.txt").write_bytes(b"hi")
    cfg = text_config(compose_config, tmp_path / "two.txt", f"backend={backend}")
    assert load_adapter(cfg, parallel_layout(cfg, 1)).training_failures() == [
        f"module.data.path={tmp_path / 'two.txt'}: 2 byte tokens is too short for module.seq_length=32 (needs more "
        f"than 33)"]


def test_a_binary_file_read_as_text_is_one_warning(tmp_path):
    (tmp_path / "blob.txt").write_bytes(bytes(range(256)) * 4)
    assert binary_text_warning(tmp_path / "blob.txt") == (
        f"module.data.path={tmp_path / 'blob.txt'}: the file is not UTF-8 text (a NUL byte or invalid UTF-8 in the "
        f"first 8192 bytes); module.data.source=text trains on the raw bytes all the same")


def test_a_folder_with_binary_files_names_how_many_and_the_first(tmp_path):
    (tmp_path / "a.txt").write_text("plain text, é and ü in UTF-8\n" * 10)
    (tmp_path / "b.txt").write_bytes(b"\xff\xfe" * 100)
    assert binary_text_warning(tmp_path) == (
        f"module.data.path={tmp_path}: 1 of the 2 files read are (the first: {tmp_path / 'b.txt'}) not UTF-8 text (a "
        f"NUL byte or invalid UTF-8 in the first 8192 bytes); module.data.source=text trains on the raw bytes all the "
        f"same")


def test_utf8_text_gets_no_warning(tmp_path):
    (tmp_path / "a.md").write_text("# título\n" + "ü" * 5000)  # a two-byte character cut at the probe's end is text
    assert binary_text_warning(tmp_path) is None


@pytest.mark.parametrize("path, weight", [("nan /data/a 1 /data/b", "nan"), ("1 /data/a inf /data/b", "inf"),
                                          ("-inf /data/a 1 /data/b", "-inf")])
def test_blend_weights_that_are_not_finite_are_one_line(path, weight):
    with pytest.raises(IndexedFileError) as refused:
        parse_blend(path)
    assert str(refused.value) == f"module.data.path={path}: weight {weight} must be > 0 (a finite number)"


# -- backend.extra_args: the backend's own declared types ------------------------------------------------------------
@pytest.mark.parametrize("annotation, value", [
    ("float", "abc"), ("float", True), ("int", 1.5), ("bool", 1), ("str", 2), ("Optional[int]", "x"),
    ("Literal['nccl', 'ucc']", "mpi"), ("list[str]", [1]), ("List[int]", 3), ("int | None", [1]),
])
def test_a_value_the_annotation_excludes_is_refused(annotation, value):
    assert type_failure("k", value, annotation, "X.k") is not None


@pytest.mark.parametrize("annotation, value", [
    ("float", 1), ("float", 0.5), ("Optional[float]", None), ("bool", False), ("Union[int, List[int]]", [1, 0]),
    ("Literal['nccl', 'ucc']", "ucc"), ("str | None", "a"), ("torch.dtype", "bf16"), ("Optional[Callable]", "f"),
    ("float | int", 3), ("Any", {"a": 1}),
])
def test_a_value_the_annotation_admits_or_cannot_judge_passes(annotation, value):
    assert type_failure("k", value, annotation, "X.k") is None


def test_the_line_names_the_key_the_value_and_the_expected_type():
    assert type_failure("training.steps", "abc", "int", "torchtitan 0.2.2's Training.steps") == (
        "backend.extra_args.training.steps=abc: expected an integer, got a string (torchtitan 0.2.2's "
        "Training.steps: int)")


@pytest.mark.parametrize("backend, argument, expected", [
    pytest.param("megatron", "hidden_dropout=abc", "expected a number, got a string (megatron-core's "
                 "TransformerConfig.hidden_dropout: float)", marks=needs_megatron_core, id="transformer_config_field"),
    pytest.param("megatron", "make_vocab_size_divisible_by=x", "expected an integer, got a string (Megatron-LM's "
                 "--make-vocab-size-divisible-by: int)", marks=needs_megatron_core, id="core_trainer_argument"),
    pytest.param("torchtitan", "training.gc_freq=often", "expected an integer, got a string (torchtitan 0.2.2's "
                 "Training.gc_freq: int)", marks=needs_torchtitan, id="job_config_field"),
    pytest.param("torchtitan", "parallelism.fsdp_reshard_after_forward=sometimes", "expected one of 'default', "
                 "'always', 'never', got a string (torchtitan 0.2.2's Parallelism.fsdp_reshard_after_forward: "
                 "Literal['default', 'always', 'never'])", marks=needs_torchtitan, id="job_config_literal"),
])
def test_an_extra_arg_of_another_type_than_the_backend_declares_is_one_line(compose_config, tmp_path, backend,
                                                                           argument, expected):
    adapter = adapter_for(compose_config, tmp_path, backend, f"+backend.extra_args.{argument}")
    assert adapter.validate() == [f"backend.extra_args.{argument}: {expected}"]


@needs_megatron_core
def test_megatron_takes_a_moe_layer_pattern_string(compose_config, tmp_path):
    adapter = adapter_for(compose_config, tmp_path, "megatron", "+backend.extra_args.moe_layer_freq='([1]*4)'")
    assert adapter.validate() == []


@needs_torchtitan
def test_an_owned_key_of_the_wrong_type_is_one_line_not_two(compose_config, tmp_path):
    adapter = adapter_for(compose_config, tmp_path, "torchtitan", "+backend.extra_args.training.steps=abc")
    assert [line.split(":")[0] for line in adapter.validate()] == ["backend.extra_args.training.steps=abc"]
