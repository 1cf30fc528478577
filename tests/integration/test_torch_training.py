"""The native trainer for real on the CPU: loss falls, checkpoints are atomic, resume is bitwise, bad data and
bad checkpoints are one clear error before training."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.compose import compose_primus, run_job
from helpers.overrides import QUIET_LOGS, SMALL_BATCHES
from primus_hydra.backends.common.checkpoint import CheckpointManager
from primus_hydra.backends.common.metrics import read_metrics
from primus_hydra.errors import CheckpointError, ConfigValidationError, DataError, PrimusError

pytestmark = pytest.mark.slow  # every test here trains or runs real processes for seconds

# small and fast: 2 micro-batches of 4 x 64 tokens per step
FAST = [*SMALL_BATCHES, "module.warmup_iters=2", *QUIET_LOGS, "module.checkpoint.interval=0"]


def train(compose_config, run_dir: Path, *overrides: str):
    cfg = compose_config(*FAST, *overrides)
    result = run_job(cfg, run_dir)
    return result, read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []


@pytest.fixture(scope="module")
def trained_on_text(tmp_path_factory):
    """40 steps on the default text at lr 3e-3, the last one saved: the run whose loss falls, and the weights a
    post-training run starts from (trained once for both)."""
    run_dir = tmp_path_factory.mktemp("trained_on_text")
    final, records = train(compose_primus, run_dir, "module.train_iters=40", "module.lr=3e-3")
    return run_dir, final, records


def test_loss_falls_on_real_text(trained_on_text):
    run_dir, final, records = trained_on_text
    # what the run returns is task.objective: without evaluation, the mean of the last 10 training losses
    assert len(records) == 40 and final == pytest.approx(np.mean([r["loss"] for r in records[-10:]]), rel=1e-12)
    assert records[0]["loss"] > 5.0  # ~ln(256) at initialisation
    assert np.mean([r["loss"] for r in records[-5:]]) < records[0]["loss"] - 1.5
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu"} <= set(records[-1])
    assert "model:\n  name: llama_tiny" in (run_dir / "config_resolved.yaml").read_text()


def test_run_dir_holds_checkpoint_metrics_tensorboard_and_plot(compose_config, tmp_path):
    train(compose_config, tmp_path, "module.train_iters=4", "module.log.tensorboard=true", "module.log.plot=true",
          "module.checkpoint.interval=2")
    checkpoints = tmp_path / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "step_0000004"
    assert CheckpointManager(checkpoints).steps() == [2, 4]
    assert not [p for p in checkpoints.iterdir() if p.name.startswith(".")]  # no temp leftovers
    assert (tmp_path / "loss_curve.png").stat().st_size > 1000
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_resume_is_bitwise_identical_to_an_uninterrupted_run(compose_config, tmp_path):
    _, straight = train(compose_config, tmp_path / "straight", "module.train_iters=8")
    _, first = train(compose_config, tmp_path / "first", "module.train_iters=8", "module.exit_interval=4")
    assert [r["step"] for r in first] == [1, 2, 3, 4]
    _, resumed = train(compose_config, tmp_path / "second", "module.train_iters=8",
                       f"module.checkpoint.resume={tmp_path / 'first' / 'checkpoints'}")
    assert [r["step"] for r in resumed] == [5, 6, 7, 8]
    assert [r["loss"] for r in first + resumed] == [r["loss"] for r in straight]
    assert [r["grad_norm"] for r in first + resumed] == [r["grad_norm"] for r in straight]


def test_resume_auto_continues_in_the_same_run_dir(compose_config, tmp_path):
    train(compose_config, tmp_path, "module.train_iters=6", "module.exit_interval=3")
    _, records = train(compose_config, tmp_path, "module.train_iters=6", "module.checkpoint.resume=auto")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]


def test_fresh_run_refuses_a_checkpoint_dir_that_holds_checkpoints(compose_config, tmp_path):
    train(compose_config, tmp_path / "a", "module.train_iters=2")
    with pytest.raises(ConfigValidationError, match=r"already holds checkpoints \(step 2\); set module.checkpoint.resume=auto"):
        train(compose_config, tmp_path / "b", "module.train_iters=2", f"module.checkpoint.dir={tmp_path / 'a' / 'checkpoints'}")
    assert CheckpointManager(tmp_path / "a" / "checkpoints").steps() == [2]


def test_fresh_run_never_appends_to_an_earlier_runs_metrics(compose_config, tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 9.0}\n')
    with pytest.raises(PrimusError, match=r"metrics.jsonl already holds an earlier run's metrics; choose a new hydra.run.dir"):
        train(compose_config, tmp_path, "module.train_iters=2", f"module.checkpoint.dir={tmp_path / 'other'}")
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "loss": 9.0}\n'


def test_missing_resume_checkpoint_is_named(compose_config, tmp_path):
    with pytest.raises(ConfigValidationError, match=r"module.checkpoint.resume=/no/such/ckpt: no such checkpoint"):
        train(compose_config, tmp_path, "module.train_iters=2", "module.checkpoint.resume=/no/such/ckpt")


def test_corrupt_resume_checkpoint_names_the_file(compose_config, tmp_path):
    train(compose_config, tmp_path / "a", "module.train_iters=2")
    (shard,) = (tmp_path / "a" / "checkpoints" / "step_0000002").glob("*.distcp")
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"\.distcp has 100 bytes, expected \d+ \(truncated or corrupt\)"):
        train(compose_config, tmp_path / "b", "module.train_iters=4", f"module.checkpoint.resume={tmp_path / 'a' / 'checkpoints'}")


def test_checkpoint_of_another_model_does_not_fit(compose_config, tmp_path):
    train(compose_config, tmp_path / "a", "module.train_iters=2")
    with pytest.raises(ConfigValidationError, match=r"holds the weights of model=llama_tiny \([\d,]+ parameters\); this "
                                                    r"run builds model=moe_tiny with [\d,]+: they cannot load into it"):
        train(compose_config, tmp_path / "b", "model=moe_tiny", "module.train_iters=2",
              f"module.checkpoint.load={tmp_path / 'a' / 'checkpoints'}")


def test_post_trainer_starts_from_loaded_weights(compose_config, tmp_path, trained_on_text):
    pre_dir, _, pre = trained_on_text
    _, sft = train(compose_config, tmp_path / "sft", "module=post_trainer", *FAST, "module.train_iters=2",
                   f"module.checkpoint.load={pre_dir / 'checkpoints'}")
    assert sft[0]["loss"] < pre[0]["loss"] - 1.0


def test_token_file_source(compose_config, tmp_path):
    tokens = tmp_path / "tokens.bin"
    np.tile(np.arange(50, dtype=np.uint16), 200).tofile(tokens)
    _, records = train(compose_config, tmp_path / "run", "module.train_iters=3", "module.data.source=tokens",
                       f"module.data.path={tokens}")
    assert len(records) == 3


@pytest.mark.parametrize(
    "setup, overrides, message",
    [
        (None, ["module.data.path=/no/such/corpus"], "module.data.path=/no/such/corpus: no such file or folder"),
        ("odd", ["module.data.source=tokens", "module.data.path={file}"], "3 bytes is not a whole number of uint16 tokens (2 bytes each)"),
        ("big", ["module.data.source=tokens", "module.data.path={file}"], "token id 999 >= model.vocab_size=256"),
        ("empty_dir", ["module.data.path={dir}"], "no text found"),
    ],
)
def test_bad_data_is_one_clear_error(compose_config, tmp_path, setup, overrides, message):
    file, folder = tmp_path / "tokens.bin", tmp_path / "empty"
    folder.mkdir()
    if setup == "odd":
        file.write_bytes(b"\x01\x02\x03")
    elif setup == "big":
        np.full(1000, 999, dtype=np.uint16).tofile(file)
    overrides = [o.format(file=file, dir=folder) for o in overrides]
    # a missing path is found before the run starts (ConfigValidationError); a bad file when it is read (DataError)
    with pytest.raises((ConfigValidationError, DataError), match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        train(compose_config, tmp_path / "run", "module.train_iters=2", *overrides)


def test_bf16_autocast_trains(compose_config, tmp_path):
    _, records = train(compose_config, tmp_path, "module.train_iters=3", "module.precision=bf16")
    assert all(np.isfinite(r["loss"]) for r in records)


@pytest.mark.parametrize("balancing", ["aux_loss", "seq_aux_loss"])
def test_moe_model_trains_and_logs_aux_loss(compose_config, tmp_path, balancing):
    _, records = train(compose_config, tmp_path, "model=moe_tiny", "module.train_iters=3", f"model.moe.load_balancing_type={balancing}")
    assert len(records) == 3 and records[-1]["moe_aux_loss"] > 0
