"""How sweep points are named (by what varies) and how many of them an ecosystem launcher runs at once."""
from __future__ import annotations

import pytest

from primus_hydra.launch.sweep.concurrency import JOBLIB_LAUNCHER, SUBMITIT_LOCAL_LAUNCHER, points_run_at_once
from primus_hydra.launch.sweep.labels import LABEL_WIDTH, fixed_overrides, point_label, recorded_command_line

COMMAND_LINE = ["module.lr=1e-3,1e9", "module.train_iters=2", "module.log.plot=false", "+platform.env.X=a,b"]


def test_a_point_is_named_by_the_keys_its_sweep_varies():
    fixed = fixed_overrides(COMMAND_LINE)
    assert fixed == {"module.train_iters", "module.log.plot"}
    # the sweeper writes values back its own way (1e9 -> 1000000000.0, false -> False)
    point = ["module.lr=1000000000.0", "module.train_iters=2", "module.log.plot=False", "+platform.env.X=b"]
    assert point_label(3, point, fixed) == "[job 3: module.lr=1000000000.0 +platform.env.X=b]"


def test_keys_a_sweeper_adds_are_shown_and_a_point_with_nothing_varying_shows_everything():
    fixed = fixed_overrides(["module.train_iters=2"])
    assert point_label(0, ["module.lr=0.001", "module.train_iters=2"], fixed) == "[job 0: module.lr=0.001]"  # Optuna's
    assert point_label(1, ["module.train_iters=2"], fixed) == "[job 1: module.train_iters=2]"


def test_a_label_shows_values_as_typed_and_stays_short():
    label = point_label(0, ["hydra.run.dir=/a\\:b", *[f"+x{i}=" + "v" * 20 for i in range(10)]], set())
    assert label.startswith("[job 0: hydra.run.dir=/a:b +x0=")
    assert len(label) <= LABEL_WIDTH + len("[job 0: ]") and label.endswith("…]")


def test_the_recorded_command_line_is_the_sweep_records(tmp_path):
    (tmp_path / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - module.lr=1e-3,2e-3\n    - a=1\n")
    assert recorded_command_line(tmp_path / "multirun.yaml") == ["module.lr=1e-3,2e-3", "a=1"]


@pytest.mark.parametrize("launcher, vcpus, expected", [
    ({"_target_": JOBLIB_LAUNCHER, "n_jobs": 2}, 8, 2),
    ({"_target_": JOBLIB_LAUNCHER, "n_jobs": -1}, 8, 8),  # joblib: every core
    ({"_target_": JOBLIB_LAUNCHER, "n_jobs": -2}, 8, 7),  # all but one
    ({"_target_": JOBLIB_LAUNCHER, "n_jobs": None}, 8, 1),
    ({"_target_": SUBMITIT_LOCAL_LAUNCHER, "array_parallelism": 256}, 4, 4),
    ({"_target_": SUBMITIT_LOCAL_LAUNCHER, "array_parallelism": 2}, 4, 2),
    ({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, 8, 1),
])
def test_points_an_ecosystem_launcher_runs_at_once(launcher, vcpus, expected):
    assert points_run_at_once(launcher, vcpus) == expected
