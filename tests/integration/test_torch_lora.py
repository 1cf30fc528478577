"""module.peft.method=lora on backend=torch: adapters on the loaded base weights, the base frozen bit for bit (its
tensors in the LoRA run's checkpoint equal the base run's), every adapter trained away from its zero start, over
dp=2; a LoRA run stopped by exit_interval resumes (adapters and their optimizer state from its own checkpoint) on
the curve of an uninterrupted one."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.cli import primus
from helpers.curves import assert_same_curve, eval_losses, losses
from helpers.overrides import SHORT_RUN
from primus_hydra.backends.common.foreign_checkpoints import read_checkpoint_tensors

pytestmark = pytest.mark.slow

LORA = ["module.peft.method=lora", "module.peft.rank=8", "module.checkpoint.save_final=true"]


def run(run_dir: Path, *args: str) -> dict[int, float]:
    result = primus(f"hydra.run.dir={run_dir}", *SHORT_RUN, *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return losses(run_dir)


def model_tensors(step: Path) -> dict[str, torch.Tensor]:
    return read_checkpoint_tensors(step, lambda key: key.startswith("model."), "backend=torch")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("base") / "run"
    run(run_dir, "module.checkpoint.save_final=true")
    return run_dir / "checkpoints"


def test_lora_trains_the_adapters_and_leaves_the_base_weights_as_loaded(tmp_path, base):
    run_dir = tmp_path / "lora"
    run(run_dir, *LORA, f"module.checkpoint.load={base}", "launch.nproc_per_node=2")
    # llama_tiny, per layer: wq 8x(256+256), wk and wv 8x(256+128), wo 8x(256+256), w1 and w3 8x(256+688), w2 8x(688+256)
    per_layer = 8 * (512 + 384 + 384 + 512 + 944 + 944 + 944)
    log = (run_dir / "logs" / "rank_0.log").read_text()
    assert f"this rank trains {4 * per_layer:,} of " in log
    before, after = model_tensors(base / "step_0000005"), model_tensors(run_dir / "checkpoints" / "step_0000005")
    adapters = sorted(key for key in after if ".lora." in key)
    assert sorted(key for key in after if ".lora." not in key) == sorted(before)
    assert all(torch.equal(after[key], before[key]) for key in before)
    up = [key for key in adapters if key.endswith(".lora.b")]
    assert len(up) == 4 * 7 and all(after[key].abs().sum() > 0 for key in up)


def test_a_stopped_lora_run_resumes_on_the_uninterrupted_curve(tmp_path, base):
    load = f"module.checkpoint.load={base}"
    whole = run(tmp_path / "whole", *LORA, load, "module.train_iters=6")
    stopped = tmp_path / "stopped"
    run(stopped, *LORA, load, "module.train_iters=6", "module.exit_interval=3")
    resumed = run(stopped, *LORA, load, "module.train_iters=6", "module.checkpoint.resume=auto")
    assert_same_curve(resumed, whole)


def test_an_exported_lora_run_is_the_adapted_model_and_its_step_is_not_loaded_as_plain_weights(tmp_path, base):
    """task=export folds each adapter into its weight (W + alpha/r B A): the HF folder evaluates as the LoRA model
    did (the same held-out batches; an lr of 1e-12 for the one step before that evaluation). A LoRA step named as
    plain weights is one line saying so."""
    evaluate = ["module.eval_interval=5", "module.eval_iters=2"]
    lora = tmp_path / "lora"
    run(lora, *LORA, f"module.checkpoint.load={base}", *evaluate)
    exported = tmp_path / "exported"
    result = primus("task=export", f"task.checkpoint={lora}", f"task.out={exported}", "task.dtype=fp32", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    from_export = tmp_path / "from_export"
    run(from_export, f"model.from_hf={exported}", f"module.checkpoint.load={exported}", "module.train_iters=1",
        "module.warmup_iters=0", "module.lr=1e-12", "module.eval_interval=1", "module.eval_iters=2")
    assert eval_losses(from_export)[1] == pytest.approx(eval_losses(lora)[5], rel=1e-6)
    result = primus(f"hydra.run.dir={tmp_path / 'plain'}", *SHORT_RUN, f"module.checkpoint.load={lora / 'checkpoints'}",
                    cwd=tmp_path)
    assert result.returncode != 0
    assert "is a LoRA run's step (adapters beside frozen weights); export it with task=export" in result.stderr
