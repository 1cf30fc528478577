"""Multi-process training on this machine (gloo on CPU), launched by the orchestrator's elastic agent:
every parallel layout reproduces the single-process loss curve, checkpoints reshard, faults end the job
promptly with the failed rank named, and bad layouts stop before any worker starts."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.curves import assert_same_curve, eval_losses, losses, trained_once
from helpers.overrides import NO_CHECKPOINTS, QUIET_LOGS, saving_every

pytestmark = pytest.mark.slow  # every test here trains or runs real processes for seconds

SMALL = ["module.warmup_iters=1", "module.micro_batch_size=2", "module.global_batch_size=8", "module.seq_length=32",
         "module.log.interval=1", *QUIET_LOGS, *NO_CHECKPOINTS, "module.eval_interval=3", "module.eval_iters=2"]
LAYOUTS = {
    "dp2": ["launch.nproc_per_node=2"],
    "fsdp2": ["launch.nproc_per_node=2", "module.parallel.fsdp=true"],
    "tp2": ["launch.nproc_per_node=2", "module.parallel.tp=2"],
    "pp2_1f1b": ["launch.nproc_per_node=2", "module.parallel.pp=2"],
    "pp2_gpipe": ["launch.nproc_per_node=2", "module.parallel.pp=2", "module.parallel.pp_schedule=gpipe"],
    "tp2_dp2": ["launch.nproc_per_node=4", "module.parallel.tp=2"],
}


def primus(run_dir: Path, *args: str, env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "primus_hydra", f"hydra.run.dir={run_dir}", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=run_dir.parent)


class Curve(dict):
    """step -> loss, and the run dir it came from."""

    run_dir: Path


@pytest.fixture(scope="module")
def single_process_curve(tmp_path_factory) -> dict[int, float]:
    run_dir = tmp_path_factory.mktemp("single") / "run"
    result = primus(run_dir, "module.train_iters=6", *SMALL)
    assert result.returncode == 0, result.stderr
    curve = Curve(losses(run_dir))
    curve.run_dir = run_dir
    assert list(eval_losses(run_dir)) == [3, 6]
    return curve


@pytest.fixture(scope="module")
def layout_run(tmp_path_factory):
    """Each layout's 6-step run, trained once, saving at step 3 and 6: its curve is checked by one test and its step 3
    is what another resumes on one process."""
    def train(run_dir: Path, layout: str) -> None:
        result = primus(run_dir, "module.train_iters=6", *saving_every(3, SMALL), *LAYOUTS[layout])
        assert result.returncode == 0, result.stderr[-3000:]

    return trained_once(lambda layout: tmp_path_factory.mktemp(layout) / "run", train)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_parallel_layout_reproduces_the_single_process_curve(single_process_curve, layout_run, layout):
    run_dir = layout_run(layout)
    assert_same_curve(losses(run_dir), single_process_curve)
    # the held-out evaluation too, forward only through each layout (the pipeline schedule's eval with pp)
    assert_same_curve(eval_losses(run_dir), eval_losses(single_process_curve.run_dir))
    world = 4 if layout == "tp2_dp2" else 2
    assert sorted(p.name for p in (run_dir / "logs").glob("rank_*.log")) == [f"rank_{r}.log" for r in range(world)]
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / ".primus" / "job_config.yaml").is_file()
    assert json.loads((run_dir / ".primus" / "provenance.json").read_text())["launcher"] == "elastic"


@pytest.mark.parametrize("layout", ["dp2", "fsdp2", "tp2", "pp2_1f1b"])
def test_checkpoint_from_a_parallel_layout_resumes_on_one_process(tmp_path, single_process_curve, layout_run, layout):
    step = layout_run(layout) / "checkpoints" / "step_0000003"
    assert json.loads((step / "meta.json").read_text())["world_size"] == 2
    second = primus(tmp_path / "second", "module.train_iters=6", *SMALL, f"module.checkpoint.resume={step}")
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = losses(tmp_path / "second")
    assert sorted(resumed) == [4, 5, 6]
    first = {s: loss for s, loss in losses(layout_run(layout)).items() if s <= 3}
    assert_same_curve({**first, **resumed}, single_process_curve)


def test_user_torchrun_shares_one_run_dir_and_is_not_launched_again(tmp_path, single_process_curve):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PRIMUS_OUTPUT_ROOT"] = str(tmp_path / "outputs")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "primus_hydra",
                             "module.train_iters=6", *SMALL], capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "outputs").glob("*/*/metrics.jsonl")]
    assert run_dir.name.startswith("torchrun-")
    assert len(list((tmp_path / "outputs").glob("**/.hydra"))) == 1  # only rank 0 writes Hydra's files
    assert not (run_dir / ".primus" / "job_config.yaml").exists()  # no second launch inside the job
    assert (run_dir / ".primus" / "run.lock").is_file()  # rank 0 held the run dir for the job
    assert_same_curve(losses(run_dir), single_process_curve)


@pytest.mark.parametrize("task, shared", [("train", True), ("benchmark", False)])
def test_the_agent_imports_what_a_training_jobs_workers_share_before_it_forks_them(task, shared):
    """torch._dynamo (every torch optimizer's first step imports it) once in the agent, not in each forked worker;
    a benchmark's workers make no optimizer step. In a fresh interpreter: the agent's own imports only."""
    code = ("import sys\nfrom primus_hydra.launch.elastic import import_what_the_workers_share\n"
            f"import_what_the_workers_share({task!r})\nprint('torch._dynamo' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [str(shared)]


def test_a_raising_rank_fails_the_job_naming_it(tmp_path):
    started = time.monotonic()
    result = primus(tmp_path / "run", "module.train_iters=20", *SMALL, *LAYOUTS["dp2"], env={"PRIMUS_FAULT": "raise:1:2"})
    assert result.returncode == 1
    assert time.monotonic() - started < 60
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: rank 1 failed (exit code 1): InjectedFault: injected fault on rank 1 at step 2; its log:")
    assert "rank_1.log" in line


def test_a_killed_rank_fails_the_job_naming_it(tmp_path):
    started = time.monotonic()
    result = primus(tmp_path / "run", "module.train_iters=40", *SMALL, *LAYOUTS["dp2"], env={"PRIMUS_FAULT": "kill:1:2"})
    assert result.returncode == 1
    assert time.monotonic() - started < 60
    assert "error: rank 1 failed (signal SIGKILL)" in result.stderr


def test_a_rank_killed_during_a_save_leaves_latest_loadable(tmp_path, single_process_curve):
    checkpointing = saving_every(2, SMALL)
    result = primus(tmp_path / "run", "module.train_iters=6", *checkpointing, *LAYOUTS["dp2"],
                    env={"PRIMUS_FAULT": "kill_during_save:1:4"})
    assert result.returncode == 1 and "rank 1 failed (signal SIGKILL)" in result.stderr
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "step_0000002"
    assert (checkpoints / ".tmp-step_0000004").is_dir() and not (checkpoints / "step_0000004").exists()
    resumed = primus(tmp_path / "resumed", "module.train_iters=6", *SMALL, f"module.checkpoint.resume={checkpoints}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_curve(losses(tmp_path / "resumed"), {s: loss for s, loss in single_process_curve.items() if s > 2})


def test_max_restarts_resumes_from_the_last_checkpoint(tmp_path, single_process_curve):
    checkpointing = saving_every(2, SMALL)
    result = primus(tmp_path / "run", "module.train_iters=6", *checkpointing, *LAYOUTS["dp2"], "launch.max_restarts=1",
                    env={"PRIMUS_FAULT": "kill:1:3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_curve(losses(tmp_path / "run"), single_process_curve)
    log = (tmp_path / "run" / "logs" / "rank_0.log").read_text()
    assert "resumed from" in log and "step_0000002" in log


def test_sigterm_to_the_main_process_checkpoints_then_stops_every_worker(tmp_path):
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    process = subprocess.Popen([sys.executable, "-m", "primus_hydra", f"hydra.run.dir={run_dir}", "module.train_iters=10000",
                                *SMALL, *LAYOUTS["dp2"], "module.checkpoint.on_signal=true"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run_dir / "metrics.jsonl").exists():
        time.sleep(0.2)
    while time.monotonic() < deadline and len((run_dir / "metrics.jsonl").read_text().splitlines()) < 3:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "error: stopped by SIGTERM" in stderr
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert int(latest.removeprefix("step_")) >= 3
    assert "stopping at step" in (run_dir / "logs" / "rank_0.log").read_text()


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (["launch.nproc_per_node=2", "platform.device=cuda"], {"CUDA_VISIBLE_DEVICES": "0"},
         "error: launch.nproc_per_node=2 exceeds the 1 visible GPU(s) of this node"),
        (["launch.nproc_per_node=2", "module.parallel.tp=2", "module.parallel.fsdp=true"], {},
         "error: module.parallel.fsdp=true needs dp > 1 to shard over (world 2 = tp 2 x pp 1)"),
        (["launch.nproc_per_node=4", "module.parallel.pp=2", "module.parallel.tp=2"], {},
         "error: module.parallel.pp=2 with tp=2, dp=1, fsdp=false: backend=torch runs pp alone"),
        (["launch.nproc_per_node=2", "model=moe_tiny", "module.parallel.tp=2"], {},
         "error: module.parallel.tp=2: backend=torch shards dense GQA models only (moe_tiny uses MoE)"),
        (["launch.nproc_per_node=3"], {}, "error: module.global_batch_size=8 is not divisible by module.micro_batch_size*dp = 2*3 = 6"),
        (["launch.nproc_per_node=3", "module.parallel.tp=2"], {},
         "error: world size 3 (launch.nnodes x launch.nproc_per_node) is not divisible by tp*pp*cp = 2*1*1 = 2"),
    ],
    ids=["more_procs_than_gpus", "fsdp_without_dp", "pp_with_tp", "tp_with_moe", "batch_not_divisible", "world_layout"],
)
def test_bad_layout_is_one_line_before_any_worker_starts(tmp_path, args, env, expected):
    result = primus(tmp_path / "run", "module.train_iters=2", *SMALL, *args, env=env, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert all(line.startswith("error: ") for line in lines) and any(line.startswith(expected) for line in lines), result.stderr
    assert not (tmp_path / "run" / "logs" / "workers").exists()


def test_busy_master_port_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = primus(tmp_path / "run", "module.train_iters=2", *SMALL, *LAYOUTS["dp2"], f"launch.master_port={port}", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"error: launch.master_port={port} is busy on 127.0.0.1")


def test_a_restart_before_any_checkpoint_trains_again_from_the_start(tmp_path, single_process_curve):
    result = primus(tmp_path / "run", "module.train_iters=6", *SMALL, *LAYOUTS["dp2"], "launch.max_restarts=1",
                    env={"PRIMUS_FAULT": "kill:1:1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_curve(losses(tmp_path / "run"), single_process_curve)


@pytest.mark.timing  # launch.timeout_s=5 against the ranks' start-up: run alone (tests/integration/conftest.py)
def test_a_stuck_rank_times_out_instead_of_hanging_the_job(tmp_path):
    started = time.monotonic()
    result = primus(tmp_path / "run", "module.train_iters=40", *SMALL, *LAYOUTS["dp2"], "launch.timeout_s=5",
                    "launch.shutdown_timeout_s=2", env={"PRIMUS_FAULT": "hang:1:2"}, timeout=120)
    assert result.returncode == 1
    assert time.monotonic() - started < 60
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: rank 0 failed (exit code 1): ")  # rank 0 waited for rank 1 and gave up


def test_two_nodes_rendezvous_through_c10d_and_train_the_same_curve(tmp_path, single_process_curve):
    """Two orchestrators on this machine play two nodes (one worker each) sharing a run dir, as on a shared FS."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS")}
    common = [sys.executable, "-m", "primus_hydra", f"hydra.run.dir={tmp_path / 'run'}", "module.train_iters=6", *SMALL,
              "launch.nnodes=2", "launch.nproc_per_node=1", f"launch.master_port={port}"]
    nodes = [subprocess.Popen([*common, f"launch.node_rank={rank}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=tmp_path) for rank in (0, 1)]
    outputs = [node.communicate(timeout=180) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    assert_same_curve(losses(tmp_path / "run"), single_process_curve)


@pytest.mark.timing  # a 5 s rendezvous timeout, its wall time bounded: run alone (tests/integration/conftest.py)
def test_a_node_that_never_comes_ends_the_rendezvous_within_launch_timeout_s(tmp_path):
    """launch.nnodes=2 with only this node started: the c10d rendezvous gives up after launch.timeout_s, in one line."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = primus(tmp_path / "run", "module.train_iters=2", *SMALL, "launch.nnodes=2", "launch.timeout_s=5",
                    f"launch.master_port={port}")
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: launch.nnodes=2: the nodes did not all meet at ") and "launch.timeout_s=5 s" in line
    assert elapsed < 60, f"waited {elapsed:.0f} s, launch.timeout_s=5"
