"""Evaluation's data and what a run returns: the held-out split of each token source, module.data.split's rules,
task.objective read from metrics.jsonl, and the loss PNG's second curve. The backends' evaluations themselves
(forward only, every layout, parity with backend=torch) are in the integration tier's curve tests."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from primus_hydra.backends.common.data import TokenBatches
from primus_hydra.backends.common.metrics import plot_loss_curve
from primus_hydra.config.data_split import split_failure, split_fractions
from primus_hydra.errors import ConfigValidationError, DataError
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.tasks.objective import run_objective

SEQ = 16


def counting_tokens(tmp_path, count: int) -> str:
    """A token file whose token i is i % 60000: a window's first token says where it starts."""
    path = tmp_path / "tokens.bin"
    (np.arange(count) % 60000).astype(np.uint16).tofile(path)
    return str(path)


def test_training_never_reads_the_held_out_tail_and_evaluation_reads_only_it(tmp_path):
    path = counting_tokens(tmp_path, 2000)
    batches = TokenBatches("tokens", path, "uint16", 65536, SEQ, seed=3, held_out=0.1)
    assert batches.train_end == 1800
    training = [batches.sequence(step, index) for step in range(50) for index in range(8)]
    held_out = [batches.sequence(step, index, held_out=True) for step in range(50) for index in range(8)]
    assert all(window[-1] < 1800 for window in training)  # the window's last token lies before the tail
    assert all(window[0] >= 1800 for window in held_out)
    # every evaluation sees the same batches
    again = TokenBatches("tokens", path, "uint16", 65536, SEQ, seed=3, held_out=0.1)
    np.testing.assert_array_equal(again.held_out_batches().batch(2, 0, 4)[0], batches.held_out_batches().batch(2, 0, 4)[0])


def test_without_evaluation_training_reads_all_of_the_data(tmp_path):
    path = counting_tokens(tmp_path, 2000)
    batches = TokenBatches("tokens", path, "uint16", 65536, SEQ, seed=3)
    assert batches.train_end == 2000
    assert max(batches.sequence(step, index)[-1] for step in range(200) for index in range(8)) >= 1800


def test_mock_tokens_hold_out_a_stream_no_training_step_draws():
    batches = TokenBatches("mock", None, "uint16", 256, SEQ, seed=3, held_out=0.02)
    for step in range(5):
        assert not np.array_equal(batches.sequence(step, 0), batches.sequence(step, 0, held_out=True))


def test_a_held_out_share_too_small_for_one_window_is_one_line(tmp_path):
    path = counting_tokens(tmp_path, 400)
    with pytest.raises(DataError, match=r"module.data.split: 400 tokens .* leave 392 for training and 8 held out"):
        TokenBatches("tokens", path, "uint16", 65536, SEQ, seed=3, held_out=0.02)


@pytest.mark.parametrize("text, fractions", [("98,2,0", (0.98, 0.02)), ("969,30,1", (0.969, 0.03)), ("1,1", (0.5, 0.5))])
def test_split_weights_are_megatrons(text, fractions):
    assert split_fractions(text) == pytest.approx(fractions)


@pytest.mark.parametrize("text, evaluates, line", [
    ("98", False, "module.data.split=98: give 2 or 3 comma-separated weights: train,valid[,test]"),
    ("a,b", False, "module.data.split=a,b: give 2 or 3 comma-separated weights: train,valid[,test]"),
    ("1,-1", False, "module.data.split=1,-1: weights must be >= 0 with a positive sum"),
    ("100,0,0", True, "module.data.split=100,0,0: module.eval_interval evaluates on the valid share and trains on the "
                      "train share; both must be > 0 (e.g. 98,2,0)"),
])
def test_a_split_that_cannot_be_used_is_one_line(text, evaluates, line):
    assert split_failure(text, evaluates) == line


@pytest.mark.parametrize("overrides, line", [
    (["task.objective=eval_loss"], "task.objective=eval_loss needs an evaluation: set module.eval_interval (and "
                                   "module.eval_iters), or use task.objective=mean_loss"),
    (["module.eval_interval=0"], "module.eval_interval=0: must be >= 1 (or null)"),
    (["module.eval_interval=5", "module.eval_iters=0"], "module.eval_iters=0: must be >= 1"),
    (["task.objective_window=0"], "task.objective_window=0: must be >= 1"),
])
def test_evaluation_and_objective_settings_are_checked_before_the_run(compose_config, overrides, line):
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config(*overrides))
    assert info.value.failures == [line]


def run_dir_with(tmp_path, records: list[dict]):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return tmp_path


def settings(objective="auto", eval_interval=None, dry_run=False, window=3):
    return OmegaConf.create({"task": {"objective": objective, "objective_window": window, "dry_run": dry_run},
                             "module": {"eval_interval": eval_interval}})


RECORDS = [{"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0, "eval_loss": 4.5}, {"step": 3, "loss": 3.0},
           {"step": 4, "loss": 2.0, "eval_loss": 3.5}]


@pytest.mark.parametrize("objective, eval_interval, expected", [
    ("auto", None, 3.0),  # the mean of the last 3 training losses
    ("auto", 2, 3.5),  # the last evaluation
    ("mean_loss", 2, 3.0),
    ("loss", None, 2.0),
    ("eval_loss", 2, 3.5),
])
def test_the_objective_is_read_from_the_runs_metrics(tmp_path, objective, eval_interval, expected):
    run_dir = run_dir_with(tmp_path, RECORDS)
    assert run_objective(settings(objective, eval_interval), run_dir, say=False) == expected


def test_a_step_redone_after_a_resume_counts_once(tmp_path):
    run_dir = run_dir_with(tmp_path, RECORDS + [{"step": 4, "loss": 1.0}])
    assert run_objective(settings("loss"), run_dir, say=False) == 1.0
    assert run_objective(settings("mean_loss"), run_dir, say=False) == pytest.approx((4.0 + 3.0 + 1.0) / 3)


def test_a_run_that_trained_nothing_returns_nan_and_says_why(tmp_path, capsys):
    assert math.isnan(run_objective(settings(dry_run=True), tmp_path, say=True))
    assert capsys.readouterr().err == "warning: task.objective is nan: a dry run trains nothing\n"
    assert math.isnan(run_objective(settings(), tmp_path, say=True))
    assert "no training step in" in capsys.readouterr().err
    assert math.isnan(run_objective(settings("eval_loss", 2), run_dir_with(tmp_path, RECORDS[:1]), say=False))


def test_the_loss_plot_draws_the_held_out_losses(tmp_path):
    import matplotlib.pyplot as plt

    drawn = {}
    original = plt.Axes.plot

    def recording_plot(self, *args, **kwargs):
        drawn[kwargs.get("label")] = [list(values) for values in args[:2]]
        return original(self, *args, **kwargs)

    run_dir = run_dir_with(tmp_path, [{**record, "lr": 1e-3} for record in RECORDS])
    plt.Axes.plot = recording_plot
    try:
        png = plot_loss_curve(run_dir / "metrics.jsonl", run_dir / "loss_curve.png")
    finally:
        plt.Axes.plot = original
    assert png.is_file() and png.stat().st_size > 0
    assert drawn["eval loss (held out)"] == [[2, 4], [4.5, 3.5]]
