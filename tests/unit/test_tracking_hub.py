"""The trackers' side of the step loop (backends/common/tracking.py), without training: records are queued and
sent in order off the loop's thread; a resumed run continues the same tracker state and skips the steps the tracker
already has, saying which; an unreachable tracker is one warning and never a wait; the params are the run dir's
config, flattened, secrets redacted."""
from __future__ import annotations

import csv
import json
import logging
import socket
import time
from pathlib import Path

from omegaconf import OmegaConf

from primus_hydra.backends.common.tracker_sinks import CsvSink, MlflowSink
from primus_hydra.backends.common.tracking import STATE_FILE, ExperimentTrackers, TrackedRun, config_params, flattened


def record(step: int) -> dict:
    return {"step": step, "loss": 10.0 / step, "eval_loss": None, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0,
            "tflops": 0.1, "mfu": None}


def logger_cfg(**mlflow):
    return OmegaConf.create({"mlflow": {"tracking_uri": None, "experiment_name": "e", "run_name": None, "tags": {},
                                        **mlflow}})


def hub(run_dir: Path, sinks, resuming: bool, timeout_s: float = 5.0, queue_size: int = 1000) -> ExperimentTrackers:
    run = TrackedRun(run_dir=run_dir, name="r", group=None, params={"module.lr": "0.001"}, tags={}, timeout_s=timeout_s)
    return ExperimentTrackers(sinks, lambda: run, run_dir, timeout_s, resuming=resuming, queue_size=queue_size)


def csv_steps(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as file:
        return [int(row["step"]) for row in csv.DictReader(file)]


def test_a_resumed_run_skips_the_steps_its_tracker_has_and_says_which(tmp_path, caplog):
    first = hub(tmp_path, [CsvSink(logger_cfg())], resuming=False)
    for step in range(1, 6):
        first.log(record(step))
    first.finish({}, [], failed=True)  # as a crash after step 5 leaves it: the checkpoint was at step 2
    assert json.loads((tmp_path / STATE_FILE).read_text())["csv"] == {"logged_through": 5}
    with caplog.at_level(logging.INFO, logger="primus_hydra.train"):
        second = hub(tmp_path, [CsvSink(logger_cfg())], resuming=True)
        for step in range(3, 8):
            second.log(record(step))
        second.finish({}, [], failed=False)
    assert csv_steps(tmp_path) == [1, 2, 3, 4, 5, 6, 7]
    assert "logger csv: steps 3..5 were logged before this run resumed: not logged again" in caplog.text


def test_an_unreachable_tracker_is_one_warning_and_the_loop_never_waits(tmp_path, caplog):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sink = MlflowSink(logger_cfg(tracking_uri=f"http://127.0.0.1:{port}"))
    with caplog.at_level(logging.WARNING, logger="primus_hydra.train"):
        trackers = hub(tmp_path, [sink, CsvSink(logger_cfg())], resuming=False, timeout_s=5.0)
        started = time.perf_counter()
        for step in range(1, 201):
            trackers.log(record(step))
        logging_took = time.perf_counter() - started
        trackers.finish({"objective": 1.0}, [], failed=False)
    assert logging_took < 1.0  # 200 records queued, not sent: far below one 5 s connection attempt, even on a busy machine
    warnings = [line for line in caplog.text.splitlines() if "logger mlflow" in line]
    assert len(warnings) == 1 and "start failed" in warnings[0] and "the run goes on without it" in warnings[0]
    assert csv_steps(tmp_path) == list(range(1, 201))  # the other tracker got every step


def test_a_full_queue_drops_records_and_counts_them(tmp_path, caplog):
    class Stuck(CsvSink):
        def start(self, run, state):
            time.sleep(0.5)
            super().start(run, state)

    with caplog.at_level(logging.WARNING, logger="primus_hydra.train"):
        trackers = hub(tmp_path, [Stuck(logger_cfg())], resuming=False, queue_size=10)
        for step in range(1, 31):
            trackers.log(record(step))
        trackers.finish({}, [], failed=False)
    assert csv_steps(tmp_path) == list(range(1, 11))
    assert "logger: 20 step record(s) were not sent: the trackers fell behind by logger.queue_size=10" in caplog.text


def test_params_are_the_run_dirs_config_flattened_with_secrets_redacted(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    cfg = OmegaConf.create({"module": {"lr": 0.001, "tags": ["a", "b"]},
                            "platform": {"env": {"HF_TOKEN": "${oc.env:HF_TOKEN}", "WANDB_API_KEY": "literal-key-9",
                                                 "NOTE": "token hf_secretvalue123 inside"}}})
    params = config_params(cfg, {"hf_secretvalue123", "literal-key-9"})
    assert params == {"module.lr": "0.001", "module.tags": '["a", "b"]',
                      "platform.env.HF_TOKEN": "${oc.env:HF_TOKEN}", "platform.env.WANDB_API_KEY": "<redacted>",
                      "platform.env.NOTE": "token <redacted> inside"}
    assert flattened({"a": [{"b": 1}]}) == {"a.0.b": "1"}
