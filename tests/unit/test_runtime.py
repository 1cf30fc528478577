"""The runtime's lifecycle: phase order, dry run, cleanup on error, the run-dir log, env block semantics."""
from __future__ import annotations

import os

import pytest
import yaml

from helpers import recording_backend
from primus_hydra.distributed_env import detect_distributed_env, first_host
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.runtime.train_runtime import PrimusRuntime, apply_env_block

RECORDING = ["backend._target_=helpers.recording_backend.RecordingAdapter", "backend.name=recording"]


def prepared_runtime(cfg, run_dir):
    return PrimusRuntime(prepare(cfg, run_dir=run_dir), run_dir)


@pytest.fixture(autouse=True)
def fresh_events():
    recording_backend.EVENTS.clear()


def test_phases_run_in_the_documented_order(compose_config, tmp_path):
    runtime = prepared_runtime(compose_config(*RECORDING), tmp_path)
    assert recording_backend.EVENTS == ["adapter.convert_config", "patch:build_args"]  # when the job was prepared
    recording_backend.EVENTS.clear()
    assert runtime.run() == 1.5
    assert recording_backend.EVENTS == [
        "adapter.load_trainer_class(pretrain)", "patch:setup", "trainer.setup", "trainer.init", "patch:before_train",
        "trainer.train", "patch:after_train", "trainer.cleanup(on_error=False)",
    ]
    assert runtime.phases == [
        "env", "adapter", "backend_path", "prepare_backend", "arguments", "trainer", "patches:setup", "setup", "init",
        "patches:before_train", "train", "patches:after_train", "cleanup",
    ]


def test_error_cleans_up_once_and_lands_in_the_run_dir_log(compose_config, tmp_path):
    cfg = compose_config(*RECORDING, "+backend.extra_args.fail_in=train")
    with pytest.raises(RuntimeError, match="training exploded"):
        prepared_runtime(cfg, tmp_path).run()
    assert recording_backend.EVENTS[-2:] == ["trainer.train", "trainer.cleanup(on_error=True)"]
    log_text = (tmp_path / "logs" / "rank_0.log").read_text()
    assert "run failed: RuntimeError: training exploded" in log_text and "Traceback" in log_text


def test_dry_run_stops_after_build_args_and_writes_the_arguments(compose_config, tmp_path):
    path = prepared_runtime(compose_config(*RECORDING, "task.dry_run=true"), tmp_path).run()
    assert recording_backend.EVENTS == ["adapter.convert_config", "patch:build_args"]
    assert yaml.safe_load(path.read_text()) == {"hidden_size": 256, "fail_in": None}


def test_stage_of_post_trainer_selects_sft(compose_config, tmp_path):
    prepared_runtime(compose_config(*RECORDING, "module=post_trainer"), tmp_path).run()
    assert "adapter.load_trainer_class(sft)" in recording_backend.EVENTS


def test_trainer_override_by_target(compose_config, tmp_path):
    prepared_runtime(compose_config(*RECORDING, "backend.trainer=helpers.recording_backend.RecordingTrainer"), tmp_path).run()
    assert not any(e.startswith("adapter.load_trainer_class") for e in recording_backend.EVENTS)


def test_env_block_never_overrides_the_users_variables(monkeypatch):
    monkeypatch.setenv("PRIMUS_TEST_USER_VAR", "mine")
    monkeypatch.delenv("PRIMUS_TEST_NEW_VAR", raising=False)
    applied = apply_env_block({"PRIMUS_TEST_USER_VAR": "platform", "PRIMUS_TEST_NEW_VAR": "platform"})
    assert applied == {"PRIMUS_TEST_NEW_VAR": "platform"}
    assert os.environ["PRIMUS_TEST_USER_VAR"] == "mine"
    monkeypatch.delenv("PRIMUS_TEST_NEW_VAR")


def test_platform_env_reaches_the_worker(compose_config, tmp_path, monkeypatch):
    monkeypatch.delenv("PRIMUS_TEST_PLATFORM_VAR", raising=False)
    prepared_runtime(compose_config(*RECORDING, "+platform.env.PRIMUS_TEST_PLATFORM_VAR=hello"), tmp_path).run()
    assert os.environ.pop("PRIMUS_TEST_PLATFORM_VAR") == "hello"


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, ("single", 0, 1, 0)),
        ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h1", "MASTER_PORT": "1234"},
         ("torchrun", 3, 4, 1)),
        ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_NUM_NODES": "2",
          "SLURM_NODEID": "1", "SLURM_JOB_ID": "42"}, ("slurm", 5, 8, 1)),
        ({"SLURM_JOB_ID": "42", "SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, ("single", 0, 1, 0)),  # sbatch script, no srun step
    ],
)
def test_who_am_i_in_the_job(environ, expected):
    env = detect_distributed_env(environ)
    assert (env.launcher, env.rank, env.world_size, env.local_rank) == expected


def test_slurm_port_is_derived_from_the_job_id():
    env = detect_distributed_env({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "42"})
    assert env.master_port == 20042 and env.local_world_size == 2


@pytest.mark.parametrize("nodelist, first", [
    ("n[1-2]", "n1"), ("n1", "n1"), ("gpu-a[07-09,12],gpu-b3", "gpu-a07"), ("node[003,5]-ib", "node003-ib"),
    ("a,b", "a"), ("x[1-3],y[4]", "x1"),
])
def test_first_host_of_a_slurm_nodelist(nodelist, first):
    assert first_host(nodelist) == first


def test_an_srun_task_meets_its_peers_on_the_first_node_of_the_job():
    env = detect_distributed_env({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "42",
                                  "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_RESTART_COUNT": "1"})
    assert (env.launcher, env.master_addr, env.master_port) == ("slurm", "gpu07", 20042 + 7919)


def test_set_up_runs_without_the_collector_and_training_without_rescanning_it(compose_config, tmp_path, monkeypatch):
    """Set-up (imports, the model) makes long-lived objects: no collector pass runs in it and what it made is frozen
    while training runs with the collector on; cleanup runs with no pass; afterwards all is as it was."""
    import gc

    seen = {}
    made_in_setup = []

    def collector_runs():
        return gc.isenabled() and gc.get_threshold()[0] > 0

    def setup(self):
        seen["setup"] = collector_runs()
        made_in_setup.append([])  # a tracked object, made while the collector is paused

    def train(self):
        seen["train"] = collector_runs()
        seen["frozen in train"] = gc.get_freeze_count()
        return 1.5

    def cleanup(self, on_error=False):
        seen["cleanup"] = collector_runs()

    monkeypatch.setattr(recording_backend.RecordingTrainer, "setup", setup)
    monkeypatch.setattr(recording_backend.RecordingTrainer, "train", train)
    monkeypatch.setattr(recording_backend.RecordingTrainer, "cleanup", cleanup)
    runtime = prepared_runtime(compose_config(*RECORDING), tmp_path)
    thresholds = gc.get_threshold()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert runtime.run() == 1.5
    assert (seen["setup"], seen["train"], seen["cleanup"]) == (False, True, False)
    assert seen["frozen in train"] > 0
    # the caller's process (the Python API) is left as it was
    assert gc.isenabled() and gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
    assert gc.is_tracked(made_in_setup[0])


def test_a_library_that_turns_the_collector_off_in_set_up_keeps_it_off(compose_config, tmp_path, monkeypatch):
    """torchtitan's Trainer disables the collector (and runs it every gc_freq steps itself): the pause keeps that."""
    import gc

    seen = {}
    monkeypatch.setattr(recording_backend.RecordingTrainer, "init", lambda self: gc.disable())

    def train(self):
        seen["train"] = gc.isenabled()
        gc.enable()
        return 1.5

    monkeypatch.setattr(recording_backend.RecordingTrainer, "train", train)
    try:
        assert prepared_runtime(compose_config(*RECORDING), tmp_path).run() == 1.5
    finally:
        gc.enable()
    assert seen == {"train": False}
