"""logger=mlflow and logger=wandb against the real things: an `mlflow server` on 127.0.0.1 (SQLite store, local
artifacts) read back with MlflowClient, and W&B offline runs read back with wandb's own reader (`wandb leet
inspect`). A run SIGKILLed mid-training and resumed with resume=auto is one tracker run with every step once; a sweep
is one run per point in one group, a failing point marked failed; secrets from the environment leave no trace."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers.cli import clean_env
from helpers.compose import REPO, run_job
from helpers.trackers import client, history_steps, runs_of, the_run, wandb_records
from primus_hydra.backends.common.tracking import STATE_FILE

pytest.importorskip("mlflow")
pytest.importorskip("wandb")

pytestmark = pytest.mark.slow

# one layer of llama_tiny, 6 steps of 2 x 32 tokens, a checkpoint every 2 steps
SMALL = ["model.num_layers=1", "module.train_iters=6", "module.warmup_iters=1", "module.micro_batch_size=2",
         "module.global_batch_size=2", "module.seq_length=32", "module.log.interval=1", "module.log.tensorboard=false",
         "module.log.progress_bar=false", "module.checkpoint.interval=2", "module.checkpoint.save_final=false",
         "platform.peak_tflops_per_device=1.0"]
TRACKERS = ["logger=many", "logger.use=[mlflow,wandb]", "logger.wandb.mode=offline", "logger.timeout_s=30"]
SECRETS = {"WANDB_API_KEY": "wandb-key-5f3a9c0e1d2b4a6f", "MLFLOW_TRACKING_TOKEN": "mlflow-token-8e7d6c5b4a39"}


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{root / 'store.db'}", "--artifacts-destination",
               str(root / "artifacts"), "--workers", "1"]
    with open(root / "server.log", "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=2).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()[-3000:]
                time.sleep(0.3)
        yield uri, root
    finally:  # the server and its uvicorn worker (SIGTERM takes it ~20 s to stop; nothing is left to flush)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)


def left_in(scratch: Path) -> list[str]:
    """What the processes left in their TMPDIR but torch's compile cache (kept on purpose)."""
    return sorted(path.name for path in scratch.iterdir() if not path.name.startswith("torchinductor_"))


def no_secret_under(*folders: Path) -> list[str]:
    hits = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                hits += [f"{path}: {name}" for name, value in SECRETS.items() if value.encode() in data]
    return hits


def test_a_killed_run_resumed_with_auto_is_one_tracker_run_with_each_step_once(mlflow_server, compose_config,
                                                                                 tmp_path, monkeypatch, caplog):
    uri, store = mlflow_server
    run_dir = tmp_path / "run"
    tracked = [*TRACKERS, f"logger.mlflow.tracking_uri={uri}", "logger.mlflow.experiment_name=resume"]
    # the first attempt stops after step 5 (a stuck rank): SIGKILLed once both trackers have that step
    first = subprocess.Popen([sys.executable, "-m", "primus_hydra", f"hydra.run.dir={run_dir}", *SMALL, *tracked],
                             cwd=tmp_path, env=clean_env({"PRIMUS_FAULT": "hang:0:5", **SECRETS}),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        state = json.loads((run_dir / STATE_FILE).read_text()) if (run_dir / STATE_FILE).is_file() else {}
        if all(state.get(sink, {}).get("logged_through") == 5 for sink in ("mlflow", "wandb")):
            break
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
        time.sleep(0.2)
    first.kill()
    first.wait(30)
    first.stderr.close()

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level("INFO", logger="primus_hydra.train"):
        objective = run_job(compose_config(*SMALL, *tracked, "module.checkpoint.resume=auto"), run_dir)

    (run,) = runs_of(uri, "resume")
    assert run.info.run_id == json.loads((run_dir / STATE_FILE).read_text())["mlflow"]["run_id"]
    assert run.info.status == "FINISHED"
    assert [metric.step for metric in client(uri).get_metric_history(run.info.run_id, "loss")] == [1, 2, 3, 4, 5, 6]
    assert run.data.params["module.train_iters"] == "6" and run.data.params["logger.wandb.mode"] == "offline"
    assert run.data.tags["run_dir"] == str(run_dir.resolve()) and {"host", "git_commit"} <= set(run.data.tags)
    assert run.data.metrics["objective"] == pytest.approx(objective)
    assert {a.path for a in client(uri).list_artifacts(run.info.run_id)} == {"config_resolved.yaml", "loss_curve.png"}
    assert "logger mlflow: steps 5..5 were logged before this run resumed: not logged again" in caplog.text

    logs = wandb_records(run_dir)  # the killed attempt's, then the resumed one's: what one lacks, the other has
    assert len(logs) == 2
    readable = [records for records in logs if records]
    assert {the_run(records)["run_id"] for records in readable} == {json.loads((run_dir / STATE_FILE).read_text())["wandb"]["id"]}
    assert sorted(step for records in readable for step in history_steps(records)) == [1, 2, 3, 4, 5, 6]
    assert sum(len(history_steps(records)) for records in readable) == 6
    assert no_secret_under(run_dir, store) == []


def test_a_sweep_is_one_tracker_run_per_point_in_one_group_a_failed_point_marked_failed(mlflow_server, tmp_path):
    uri, _ = mlflow_server
    faults = "none:0:1,raise:0:2,none:0:3"  # the second point raises after step 2
    short = [override for override in SMALL if not override.startswith("module.train_iters=")]
    command = [sys.executable, "-m", "primus_hydra", "-m", "hydra/launcher=primus_local", *short, *TRACKERS,
               "module.train_iters=3", f"logger.mlflow.tracking_uri={uri}", "logger.mlflow.experiment_name=sweep",
               f"hydra.sweep.dir={tmp_path / 'sweep'}", f"+platform.env.PRIMUS_FAULT={faults}"]
    scratch = tmp_path / "tmp"  # TMPDIR: what the processes leave there (wandb makes temp dirs at import) is a leak
    scratch.mkdir()
    result = subprocess.run(command, cwd=REPO, env=clean_env({"PRIMUS_AUTO_VCPUS": "2", "TMPDIR": str(scratch)}),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert left_in(scratch) == []

    runs = sorted(runs_of(uri, "sweep"), key=lambda run: run.data.params["platform.env.PRIMUS_FAULT"])
    assert [run.info.status for run in runs] == ["FINISHED", "FINISHED", "FAILED"]  # none:0:1, none:0:3, raise:0:2
    assert len({run.data.tags["sweep"] for run in runs}) == 1
    assert runs[0].data.tags["sweep"] == f"{tmp_path.name}/sweep"

    points = [wandb_records(tmp_path / "sweep" / str(number))[0] for number in range(3)]
    assert len({the_run(records)["run_group"] for records in points}) == 1
    assert [the_run(records)["config"]["update"]["platform.env.PRIMUS_FAULT"] for records in points] == faults.split(",")
    exits = [next(r["exit"].get("exit_code", 0) for r in records if r["type"] == "exit") for records in points]
    assert exits == [0, 1, 0]


@pytest.mark.parametrize("backend", ["megatron", "torchtitan", "megatron_bridge"])
def test_megatron_torchtitan_and_bridge_feed_the_same_trackers_as_metrics_jsonl(backend, tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = tmp_path / "run"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    short = [override for override in SMALL if not override.startswith(("module.train_iters=", "module.checkpoint.interval="))]
    result = subprocess.run([sys.executable, "-m", "primus_hydra", f"backend={backend}", f"hydra.run.dir={run_dir}",
                             *short, "module.train_iters=4", "module.checkpoint.interval=0", *TRACKERS,
                             f"logger.mlflow.tracking_uri={store}", f"logger.mlflow.experiment_name={backend}"],
                            cwd=tmp_path, env=clean_env({"TMPDIR": str(scratch)}), capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert left_in(scratch) == []  # wandb's temp dirs are removed at the end
    losses = [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    (run,) = runs_of(store, backend)
    assert run.info.status == "FINISHED"
    history = client(store).get_metric_history(run.info.run_id, "loss")
    assert [(metric.step, metric.value) for metric in history] == list(enumerate(losses, start=1))
    assert run.data.params["backend._target_"].startswith(f"primus_hydra.backends.{backend}.")
    (records,) = wandb_records(run_dir)
    assert history_steps(records) == [1, 2, 3, 4]
