"""platform=slurm on a real Slurm cluster (scripts/local_slurm.sh: two slurmd nodes on this machine, accounting on):
every job shape trains the local curve, a sweep is one job array, a failed rank fails the job and the command,
preemption requeues and resumes on the same curve, a bad config submits nothing, launch.wait=false + task=status.

Skipped with the reason when no cluster answers; scripts/test.sh brings one up and sets PRIMUS_REQUIRE_SLURM=1,
which turns a missing cluster into a failure."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.curves import assert_same_curve, losses
from helpers.libraries import needs_megatron_core, needs_torchtitan
from helpers.slurm_cluster import sacct_state, squeue_job_ids, wait_until
from helpers.slurm_runs import FAST, JOB_TIMEOUT_S, LONGER_STEPS, SLURM, accounted_job_ids, primus, submission

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


SHAPES = {
    "srun_2_nodes_x_1_task": ["launch.nnodes=2"],
    "srun_1_node_x_2_tasks": ["launch.nproc_per_node=2"],
    "torchrun_2_nodes_x_1_process": ["launch.nnodes=2", "launch.mode=torchrun"],
    "torchrun_1_node_x_2_processes": ["launch.nproc_per_node=2", "launch.mode=torchrun"],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_job_shape_trains_the_local_curve_with_world_size_2(tmp_path, local_curve, shape):
    run_dir = tmp_path / "run"
    # num_workers set: nothing is left for the nodes' plans to resolve, so they run the arguments as prepared
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "module.train_iters=4", *FAST, *SLURM, *SHAPES[shape],
                    "module.data.num_workers=0")
    assert result.returncode == 0, result.stderr[-3000:]
    record = submission(run_dir)
    assert record["world_size"] == 2 and record["mode"] == shape.split("_")[0]
    assert sacct_state(record["job_id"]) == "COMPLETED"
    assert_same_curve(losses(run_dir), local_curve(4))
    resolved = (run_dir / "config_resolved.yaml").read_text()  # written once, by rank 0, in the submit-side run dir
    assert "platform:\n  name: slurm" in resolved
    assert sorted(p.name for p in (run_dir / "logs").glob("rank_*.log")) == ["rank_0.log", "rank_1.log"]
    assert_translated_once(run_dir)


def assert_translated_once(run_dir, resolved_on_nodes=None):
    """The nodes run the arguments the job was prepared with (backends/translation.py), or translate again only
    because their own plan resolved `resolved_on_nodes`, and say so."""
    for log in (run_dir / "logs").glob("rank_*.log"):
        lines = [line for line in log.read_text().splitlines() if "translated in this process" in line]
        expected = [f"this node's plan resolved {resolved_on_nodes}=auto"] if resolved_on_nodes else []
        assert [line.split("(")[-1].rstrip(")") for line in lines] == expected, lines


@needs_megatron_core
def test_backend_megatron_on_two_nodes_trains_the_local_dp2_curve(tmp_path, local_curve):
    run_dir = tmp_path / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "backend=megatron", "module.train_iters=4", *FAST, *SLURM,
                    "launch.nnodes=2")
    assert result.returncode == 0, result.stderr[-3000:]
    record = submission(run_dir)
    assert (record["world_size"], record["mode"], sacct_state(record["job_id"])) == (2, "srun", "COMPLETED")
    assert_same_curve(losses(run_dir), local_curve(4, "backend=megatron", "launch.nproc_per_node=2"))


@needs_torchtitan
def test_backend_torchtitan_with_fsdp_on_two_nodes_trains_the_local_two_process_curve(tmp_path, local_curve):
    run_dir = tmp_path / "run"
    layout = ["backend=torchtitan", "module.parallel.fsdp=true"]
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", *layout, "module.train_iters=4", *FAST, *SLURM, "launch.nnodes=2")
    assert result.returncode == 0, result.stderr[-3000:]
    record = submission(run_dir)
    assert (record["world_size"], record["mode"], sacct_state(record["job_id"])) == (2, "srun", "COMPLETED")
    assert_same_curve(losses(run_dir), local_curve(4, *layout, "launch.nproc_per_node=2"))


def test_a_two_point_sweep_runs_as_one_job_array(tmp_path, local_curve):
    sweep_dir = tmp_path / "sweep"
    result = primus(tmp_path, "-m", f"hydra.sweep.dir={sweep_dir}", "module.train_iters=4", *FAST, *SLURM,
                    "module.seed=1234,7")
    assert result.returncode == 0, result.stderr[-3000:]
    ids = [submission(sweep_dir / str(num))["job_id"] for num in (0, 1)]
    array_id = ids[0].split("_")[0]
    assert ids == [f"{array_id}_0", f"{array_id}_1"]
    assert [sacct_state(job_id) for job_id in ids] == ["COMPLETED", "COMPLETED"]
    assert_same_curve(losses(sweep_dir / "0"), local_curve(4))
    assert losses(sweep_dir / "1") != losses(sweep_dir / "0")  # the other seed really ran
    assert_translated_once(sweep_dir / "0", resolved_on_nodes="module.data.num_workers")
    assert "slurm sweep summary:" in result.stderr and result.stderr.count("COMPLETED objective") >= 2


def test_a_raising_rank_fails_the_slurm_job_and_the_command_with_its_error(tmp_path):
    run_dir = tmp_path / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "module.train_iters=20", *FAST, *SLURM, "launch.nnodes=2",
                    env={"PRIMUS_FAULT": "raise:1:2"})
    assert result.returncode == 1, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    job_id = submission(run_dir)["job_id"]
    assert line.startswith(f"error: slurm job {job_id} FAILED: task 1: InjectedFault: injected fault on rank 1 at step 2")
    assert f"{job_id}_1_log.err" in line
    assert sacct_state(job_id) == "FAILED"


def test_preemption_checkpoints_requeues_and_resumes_on_the_uninterrupted_curve(tmp_path, local_curve):
    import submitit

    iters = 24
    run_dir = tmp_path / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", f"module.train_iters={iters}", *FAST, *SLURM, *LONGER_STEPS,
                    "launch.nnodes=2", "launch.wait=false")
    assert result.returncode == 0, result.stderr[-3000:]
    record = submission(run_dir)
    metrics = run_dir / "metrics.jsonl"
    wait_until(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 4, timeout_s=120)
    submitit.SlurmJob(folder=record["submitit_folder"], job_id=record["job_id"])._interrupt()  # preemption: TERM + USR2

    wait_until(lambda: sacct_state(record["job_id"]) in ("COMPLETED", "FAILED", "CANCELLED") and
               record["job_id"] not in squeue_job_ids(), timeout_s=JOB_TIMEOUT_S)
    assert sacct_state(record["job_id"]) == "COMPLETED"
    folder = Path(record["submitit_folder"])
    log = (folder / f"{record['job_id']}_0_log.err").read_text()
    assert "preempted: checkpoint written, requeueing (attempt 1)" in log
    assert "attempt 1:" in log  # the requeued run started again ...
    resumed = re.search(r"resumed from \S+/step_(\d+) at step (\d+)", (run_dir / "logs" / "rank_0.log").read_text())
    assert resumed and 4 <= int(resumed.group(2)) < iters  # ... from the checkpoint written when preempted
    assert_same_curve(losses(run_dir), local_curve(iters, *LONGER_STEPS))


def test_a_bad_config_is_rejected_here_and_nothing_is_submitted(tmp_path):
    before = accounted_job_ids()
    single = primus(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", "module.train_iters=4", *FAST, *SLURM,
                    "launch.nnodes=2", "module.global_batch_size=6")
    fast = [arg for arg in FAST if not arg.startswith("module.global_batch_size=")]  # a sweep names a key once
    sweep = primus(tmp_path, "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", "module.train_iters=4", *fast, *SLURM,
                   "module.global_batch_size=8,6")
    mode = primus(tmp_path, f"hydra.run.dir={tmp_path / 'run2'}", *FAST, *SLURM, "launch.mode=mpirun")
    assert (single.returncode, sweep.returncode, mode.returncode) == (2, 2, 2)
    assert single.stderr.strip().splitlines() == [
        "error: module.global_batch_size=6 is not divisible by module.micro_batch_size*dp = 4*2 = 8"]
    (sweep_error,) = sweep.stderr.strip().splitlines()
    # the point is named by what varies (not the ~15 overrides every point shares)
    assert sweep_error == ("error: [job 1: module.global_batch_size=6] module.global_batch_size=6 is not divisible "
                           "by module.micro_batch_size*dp = 4*1 = 4")
    assert mode.stderr.strip().splitlines()[-1] == "error: launch.mode: Invalid value 'mpirun', expected one of [srun, torchrun]"
    # no new job (the accounting's window is a day: a day-old job may leave it meanwhile)
    assert not accounted_job_ids() - before and not squeue_job_ids()
    assert not (tmp_path / "sweep" / "0").exists()


def test_wait_false_returns_after_submission_and_task_status_follows_the_run(tmp_path):
    run_dir = tmp_path / "runs" / "run"
    started = time.monotonic()
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "module.train_iters=8", *FAST, *SLURM, "launch.wait=false",
                    "hydra.launcher.setup=['export PRIMUS_SETUP_MARK=1']", "hydra.launcher.srun_args=['--cpu-bind=none']",
                    "+hydra.launcher.additional_parameters.comment=primus-test", "hydra.launcher.name=status-test")
    assert result.returncode == 0, result.stderr[-3000:]
    record = submission(run_dir)
    job_id = record["job_id"]
    assert f"submitted slurm job {job_id} [run]" in result.stderr and "task=status" in result.stderr
    assert time.monotonic() - started < 30
    sbatch = (Path(record["submitit_folder"]) / f"{job_id}_submission.sh").read_text()
    for line in ("#SBATCH --comment=primus-test", "#SBATCH --job-name=status-test", "export PRIMUS_SETUP_MARK=1",
                 "--kill-on-bad-exit=1 --cpu-bind=none"):
        assert line in sbatch, line

    wait_until(lambda: sacct_state(job_id) == "COMPLETED", timeout_s=JOB_TIMEOUT_S)
    status = primus(tmp_path, "task=status", f"task.runs={tmp_path / 'runs'}")
    assert status.returncode == 0, status.stderr
    header, row = status.stdout.strip().splitlines()
    assert header.split()[:4] == ["job", "state", "step", "loss"]
    assert row.split()[:3] == [job_id, "COMPLETED", "8"] and row.endswith(str(run_dir))
    assert not list(tmp_path.glob("outputs")) and not (tmp_path / ".hydra").exists()  # status wrote nothing


def test_the_shell_launcher_runs_direct_sh_on_both_nodes_and_trains_the_local_curve(tmp_path, local_curve):
    """launchers/slurm.sh (srun, one direct.sh per node) -> one orchestrator per node -> c10d across the nodes."""
    launcher = Path(__file__).resolve().parents[2] / "launchers" / "slurm.sh"
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS", "PRIMUS_FAULT")}
    env["PRIMUS_OUTPUT_ROOT"] = str(tmp_path / "outputs")
    result = subprocess.run(["bash", str(launcher), "--srun", "-N", "2", "-o", str(tmp_path / "out_%j.txt"), "--",
                             "module.train_iters=4", *FAST], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs").glob("*/slurm-*")  # both nodes shared one run dir
    assert_same_curve(losses(run_dir), local_curve(4))


def test_a_users_own_srun_shares_one_run_dir_and_meets_on_the_first_node(tmp_path, local_curve):
    """`srun -N2 python -m primus_hydra`: every task is a rank (nothing launched twice), MASTER_ADDR comes from the
    job's nodelist, and all ranks write into one run dir named after the job step."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS", "PRIMUS_FAULT")}
    env["PRIMUS_OUTPUT_ROOT"] = str(tmp_path / "outputs")
    result = subprocess.run(["srun", "-N2", "-n2", "--kill-on-bad-exit=1", sys.executable, "-m", "primus_hydra",
                             "module.train_iters=4", *FAST], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs").glob("*/slurm-*.0")
    assert_same_curve(losses(run_dir), local_curve(4))
    assert sorted(p.name for p in (run_dir / "logs").glob("rank_*.log")) == ["rank_0.log", "rank_1.log"]


def test_collectives_benchmark_on_two_nodes(tmp_path):
    run_dir = tmp_path / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "task=benchmark", "task.suite=collectives", "task.iters=3",
                    "task.sizes=[4096,262144]", *SLURM, "launch.nnodes=2")
    assert result.returncode == 0, result.stderr[-3000:]
    records = json.loads((run_dir / "benchmark.json").read_text())["results"]
    assert len(records) == 6 * 2 and all(r["correct"] and r["world_size"] == 2 for r in records)
    assert {r["group"] for r in records} == {"inter_node"}  # one task per node: no intra-node group


def test_preflight_checks_every_node_in_one_report(tmp_path):
    run_dir = tmp_path / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "task=preflight", *SLURM, "launch.nnodes=2")
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((run_dir / "preflight.json").read_text())
    assert [node["node"] for node in data["nodes"]] == ["n1", "n2"]
    shared = [c for c in data["checks"] if c["name"] == "shared_dir"]
    assert [(c["node"], c["status"]) for c in shared] == [("n1", "PASS"), ("n2", "PASS")]
    assert [c["status"] for c in data["checks"] if c["name"] == "cluster.clock"] == ["PASS"]
    assert any(c["name"] == "perf.all_reduce" for c in data["checks"])


def test_preflight_names_the_node_that_cannot_see_node_0s_file(tmp_path):
    run_dir = tmp_path / "run"
    node_local = tmp_path / "local_${oc.env:SLURMD_NODENAME,submit}"  # each node resolves its own folder
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "task=preflight", *SLURM, "launch.nnodes=2",
                    f"task.shared_dir='{node_local}'")
    assert result.returncode != 0
    shared = {c["node"]: c for c in json.loads((run_dir / "preflight.json").read_text())["checks"] if c["name"] == "shared_dir"}
    assert shared["n1"]["status"] == "PASS" and shared["n2"]["status"] == "FAIL"
    assert "does not see the file node 0 wrote" in shared["n2"]["detail"]
    assert "n2 shared_dir" in result.stderr  # the command's error line names the node
