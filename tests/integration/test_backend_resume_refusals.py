"""Resume and data mistakes with backend=megatron and torchtitan (and torch beside them), typed as a user types them
on real checkpoints of real tiny runs: each is one `error:` line, exit code 2, no traceback, torch never imported
by the orchestrator, and nothing written (no run dir made, an existing one left as it was). The checks themselves,
case by case: tests/unit/test_resume_and_data_checks.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers.cli import error_lines, primus, primus_reporting_torch
from helpers.compose import compose_primus
from helpers.curves import assert_same_curve, losses
from helpers.libraries import needs_megatron_core, needs_torchtitan
from helpers.overrides import QUIET_LOGS
from primus_hydra.config.model_math import count_parameters

pytestmark = [pytest.mark.slow, needs_megatron_core, needs_torchtitan]

TINY = ["model=llama_tiny", "module.train_iters=2", "module.warmup_iters=1", "module.micro_batch_size=2",
        "module.global_batch_size=2", "module.seq_length=32", "module.data.source=mock", "module.log.interval=1",
        *QUIET_LOGS, "module.checkpoint.interval=0"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """backend -> the run dir of a real 2-step run that saved checkpoints/step_0000002 (trained once per module)."""
    runs: dict[str, Path] = {}

    def run_dir(backend: str) -> Path:
        if backend not in runs:
            runs[backend] = tmp_path_factory.mktemp(backend) / "run"
            result = primus(f"hydra.run.dir={runs[backend]}", f"backend={backend}", *TINY,
                            "module.checkpoint.save_final=true", cwd=runs[backend].parent)
            assert result.returncode == 0, result.stderr[-3000:]
        return runs[backend]

    return run_dir


def parameters(*overrides: str) -> int:
    """The parameter count a checkpoint's meta.json records for the model these overrides compose."""
    return count_parameters(compose_primus(*overrides).model)


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    return copy


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under folder with its size and modification time: what a refused run must leave as it found."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def refuse(tmp_path: Path, *args: str) -> str:
    """The one error line of a run refused while it was prepared: exit 2, no traceback, no torch, no output root."""
    out = tmp_path / "out"
    result, imported_torch = primus_reporting_torch(*TINY, *args, cwd=tmp_path, env={"PRIMUS_OUTPUT_ROOT": str(out)})
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and not imported_torch, result.stderr[-3000:]
    assert not out.exists()
    assert len(error_lines(result.stderr)) == 1, result.stderr[-3000:]
    return error_lines(result.stderr)[0]


# -- resume -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("writer, resumer", [("megatron", "torchtitan"), ("torchtitan", "megatron"),
                                             ("megatron", "torch"), ("torch", "megatron"),
                                             ("torchtitan", "torch"), ("torch", "torchtitan")])
def test_resume_auto_of_another_backends_run_dir_is_refused_and_leaves_it_as_it_was(trained, tmp_path, writer,
                                                                                  resumer):
    run_dir = copy_of(trained(writer), tmp_path)
    before = files_of(run_dir)
    step = run_dir / "checkpoints" / "step_0000002"
    assert refuse(tmp_path, f"hydra.run.dir={run_dir}", f"backend={resumer}", "module.checkpoint.resume=auto") == (
        f"error: module.checkpoint.resume=auto: {step} was written by backend={writer}; backend={resumer} resumes only "
        f"its own checkpoints: resume with backend={writer}, or start from its weights in another hydra.run.dir with "
        f"module.checkpoint.load={step}")
    assert files_of(run_dir) == before


def test_resume_of_another_backends_step_path_makes_no_run_dir(trained, tmp_path):
    step = trained("megatron") / "checkpoints" / "step_0000002"
    assert refuse(tmp_path, f"hydra.run.dir={tmp_path / 'new'}", "backend=torchtitan",
                  f"module.checkpoint.resume={step}") == (
        f"error: module.checkpoint.resume={step}: the step was written by backend=megatron; backend=torchtitan resumes "
        f"only its own checkpoints: resume with backend=megatron, or start from its weights in another hydra.run.dir "
        f"with module.checkpoint.load={step}")
    assert not (tmp_path / "new").exists()


def test_resume_auto_with_another_model_is_refused_and_leaves_the_run_dir_as_it_was(trained, tmp_path):
    run_dir = copy_of(trained("megatron"), tmp_path)
    before = files_of(run_dir)
    step = run_dir / "checkpoints" / "step_0000002"
    assert refuse(tmp_path, f"hydra.run.dir={run_dir}", "backend=megatron", "model=moe_tiny",
                  "module.checkpoint.resume=auto") == (
        f"error: module.checkpoint.resume=auto: {step} was written for model=llama_tiny, this run builds "
        f"model=moe_tiny: resume with model=llama_tiny, or choose another hydra.run.dir or module.checkpoint.dir for "
        f"this model")
    assert files_of(run_dir) == before


def test_resume_auto_after_a_model_value_changed_is_refused(trained, tmp_path):
    """torchtitan would load the first 2 of the checkpoint's 4 layers and train on, as if nothing had changed."""
    run_dir = copy_of(trained("torchtitan"), tmp_path)
    step = run_dir / "checkpoints" / "step_0000002"
    assert refuse(tmp_path, f"hydra.run.dir={run_dir}", "backend=torchtitan", "model.num_layers=2",
                  "module.checkpoint.resume=auto") == (
        f"error: module.checkpoint.resume=auto: {step} was written for model=llama_tiny with "
        f"{parameters('model=llama_tiny'):,} parameters, this run's has "
        f"{parameters('model=llama_tiny', 'model.num_layers=2'):,} (a model.* value changed): resume with the model it "
        f"was written for, or choose another hydra.run.dir or module.checkpoint.dir for this model")


# -- load ---------------------------------------------------------------------------------------------------------
def test_load_of_weights_of_another_size_makes_no_run_dir(trained, tmp_path):
    step = trained("megatron") / "checkpoints" / "step_0000002"
    assert refuse(tmp_path, f"hydra.run.dir={tmp_path / 'new'}", "backend=megatron", "model=moe_tiny",
                  f"module.checkpoint.load={step}") == (
        f"error: module.checkpoint.load={step}: the step holds the weights of model=llama_tiny "
        f"({parameters('model=llama_tiny'):,} parameters); this run builds model=moe_tiny with "
        f"{parameters('model=moe_tiny'):,}: they cannot load into it")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("backend", ["megatron", "torchtitan"])
def test_load_of_a_path_that_holds_no_checkpoint_makes_no_run_dir(tmp_path, backend):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "weights.bin").write_bytes(b"\0" * 64)
    assert refuse(tmp_path, f"hydra.run.dir={tmp_path / 'new'}", f"backend={backend}",
                  f"module.checkpoint.load={garbage}") == (
        f"error: module.checkpoint.load={garbage}: not a checkpoint (no meta.json and no `latest` inside)")
    assert not (tmp_path / "new").exists()


def test_megatron_starts_from_torchtitan_weights_on_the_curve_torch_follows_from_them(trained, tmp_path):
    """module.checkpoint.load converts the weights of every step-loop backend: torchtitan's into megatron's too."""
    step = trained("torchtitan") / "checkpoints" / "step_0000002"
    curves = {}
    for backend in ("megatron", "torch"):
        run_dir = tmp_path / backend
        result = primus(f"hydra.run.dir={run_dir}", f"backend={backend}", *TINY, f"module.checkpoint.load={step}",
                        "module.checkpoint.save_final=false", cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        curves[backend] = losses(run_dir)
    assert_same_curve(curves["megatron"], curves["torch"])


# -- data ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["megatron", "torchtitan", "torch"])
def test_text_too_short_for_one_sequence_is_refused_by_every_backend(tmp_path, backend):
    (tmp_path / "two.txt").write_bytes(b"hi")
    assert refuse(tmp_path, f"backend={backend}", "module.data.source=text",
                  f"module.data.path={tmp_path / 'two.txt'}") == (
        f"error: module.data.path={tmp_path / 'two.txt'}: 2 byte tokens is too short for module.seq_length=32 (needs "
        f"more than 33)")


def test_an_empty_text_file_is_called_an_empty_file(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert refuse(tmp_path, "backend=megatron", "module.data.source=text",
                  f"module.data.path={tmp_path / 'empty.txt'}") == (
        f"error: module.data.path={tmp_path / 'empty.txt'}: the file is empty (module.data.source=text trains on the "
        f"bytes of text files)")


def test_megatron_trains_on_a_binary_file_read_as_text_with_one_warning(tmp_path):
    blob = tmp_path / "blob.txt"
    blob.write_bytes(bytes(range(256)) * 16)
    result = primus(f"hydra.run.dir={tmp_path / 'run'}", "backend=megatron", *TINY, "module.data.source=text",
                    f"module.data.path={blob}", "module.checkpoint.save_final=false", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if line.startswith(f"warning: module.data.path={blob}")]
    assert warnings == [f"warning: module.data.path={blob}: the file is not UTF-8 text (a NUL byte or invalid UTF-8 "
                        f"in the first 8192 bytes); module.data.source=text trains on the raw bytes all the same"]
    assert sorted(losses(tmp_path / "run")) == [1, 2]


@pytest.mark.parametrize("weights", ["nan {a} 1 {b}", "1 {a} inf {b}"], ids=["nan", "inf"])
def test_blend_weights_that_are_not_finite_are_refused(tmp_path, weights):
    path = weights.format(a=tmp_path / "a", b=tmp_path / "b")
    weight = path.split()[0] if "nan" in weights else path.split()[2]
    assert refuse(tmp_path, "backend=megatron", "module.data.source=indexed", f"module.data.path='{path}'") == (
        f"error: module.data.path={path}: weight {weight} must be > 0 (a finite number)")


# -- backend.extra_args -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend, argument, expected", [
    ("megatron", "hidden_dropout=abc",
     "backend.extra_args.hidden_dropout=abc: expected a number, got a string (megatron-core's "
     "TransformerConfig.hidden_dropout: float)"),
    ("torchtitan", "training.gc_freq=often",
     "backend.extra_args.training.gc_freq=often: expected an integer, got a string (torchtitan 0.2.2's "
     "Training.gc_freq: int)"),
], ids=["megatron", "torchtitan"])
def test_an_extra_arg_of_another_type_than_the_backend_declares_is_refused(tmp_path, backend, argument, expected):
    assert refuse(tmp_path, f"backend={backend}", f"+backend.extra_args.{argument}") == f"error: {expected}"
