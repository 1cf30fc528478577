"""The Hydra ecosystem a user already sweeps with: the basic, joblib and submitit_local launchers and the Optuna
sweeper, each running real points of the tiny model through the CLI.

A failing point is a failed result that the launcher carries back and the sweeper sees: the other points run, the
sweep ends with one line counting the failures (exit 1), and Optuna's max_failure_rate decides for itself. Each
in-process job's environment is its own.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers.compose import PYTHON, REPO
from helpers.overrides import QUIET_LOGS

pytestmark = pytest.mark.slow  # every test here trains for real

FAST = ["module.train_iters=2", "module.warmup_iters=0", "module.log.interval=1", *QUIET_LOGS,
        "module.checkpoint.save_final=false"]
DIVERGES = "1e9"  # module.lr that turns the loss to NaN at step 2: a TrainingDivergedError, the user's to fix


def sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("PRIMUS_FAULT", "HYDRA_FULL_ERROR")}
    command = [PYTHON, "-m", "primus_hydra", "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", *FAST, *overrides]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def steps_trained(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_basic_launcher_runs_every_point_after_a_failed_one_and_ends_with_one_line(tmp_path):
    result = sweep(tmp_path, f"module.lr=1e-3,{DIVERGES},2e-3")
    assert result.returncode == 1, result.stderr[-2000:]
    assert [steps_trained(tmp_path / "sweep" / str(job)) for job in (0, 2)] == [[1, 2], [1, 2]]
    # the point is named by what varies, not by every override of the command line
    assert "error: [job 1: module.lr=1000000000.0] loss is nan at step 2" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 of 3 sweep point(s) failed, the others completed: [job 1: module.lr=")
    assert "Traceback" not in result.stderr
    # the points ran one after another in this process: the plan is printed once, not per point
    assert result.stderr.count("resource plan:") == 1


def test_each_in_process_job_sees_its_own_environment_block(tmp_path):
    result = sweep(tmp_path, "+platform.env.PRIMUS_DEMO_VAR=first,second")
    assert result.returncode == 0, result.stderr[-2000:]
    for job, value in ((0, "first"), (1, "second")):
        log = (tmp_path / "sweep" / str(job) / "logs" / "rank_0.log").read_text()
        assert f"PRIMUS_DEMO_VAR={value}" in log


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_a_failed_point_under_an_ecosystem_launcher_leaves_the_point_beside_it_running(tmp_path, launcher):
    settings = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    result = sweep(tmp_path, f"hydra/launcher={launcher}", *settings, f"module.lr={DIVERGES},2e-3")
    assert result.returncode == 1, result.stderr[-2000:]
    assert steps_trained(tmp_path / "sweep" / "1") == [1, 2]  # the healthy point, run at the same time, finished
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 of 2 sweep point(s) failed, the others completed: [job 0: module.lr=1000000000.0] "
                           "loss is nan"), last
    assert "UncompletedJobError" not in result.stderr and "Traceback" not in result.stderr
    # both points were planned as the two jobs that ran side by side, not each as the machine's only job
    for job in (0, 1):
        plan = json.loads((tmp_path / "sweep" / str(job) / "resources.json").read_text())
        assert plan["parallel_jobs"] == 2 and plan["threads_per_worker"] == 1, plan


def test_optuna_counts_a_failed_trial_against_max_failure_rate_and_optimizes_the_rest(tmp_path):
    # the random sampler with seed 8 draws lr 1e9, 1e-3, 1e-3: one failure in a batch of three is under the rate
    result = sweep(tmp_path, "hydra/sweeper=optuna", "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=8",
                   "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=3", "hydra.sweeper.max_failure_rate=0.5",
                   f"module.lr=choice(0.001,{DIVERGES})", "module.eval_interval=2", "module.eval_iters=1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "error: [job 0: module.lr=1000000000.0] loss is nan" in result.stderr
    assert [steps_trained(tmp_path / "sweep" / str(job)) for job in (1, 2)] == [[1, 2], [1, 2]]
    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    # what Optuna minimized is task.objective: with evaluation on, the held-out loss after the last step
    held_out = json.loads((tmp_path / "sweep" / "1" / "metrics.jsonl").read_text().splitlines()[-1])["eval_loss"]
    assert best == {"name": "optuna", "best_params": {"module.lr": 0.001}, "best_value": held_out}
