"""platform=slurm under faults, on the local cluster: a second submission into a run dir whose job is still
queued, a Slurm-side requeue of a running job, requests that could never run or never train, a pending reason
that never resolves, accounting that does not answer, the waiting command stopped by a signal, and sbatch
refusing a job. Nothing here stops a daemon: queued jobs are held back with `--begin`, and the accounting
outage is a slurm.conf copy whose slurmdbd port is closed.

Skipped with the reason when no cluster answers (PRIMUS_REQUIRE_SLURM=1 turns that into a failure)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from helpers.cli import error_lines
from helpers.curves import assert_same_curve, losses
from helpers.slurm_cluster import failed_node, sacct_state, slurm_conf_path, squeue_job_ids, wait_until
from helpers.slurm_runs import (
    FAST,
    HELD_IN_QUEUE,
    LONGER_STEPS,
    SLURM,
    WaitingCommand,
    accounted_jobs_from,
    primus,
    queued_jobs_from,
    scancel,
    submission,
)
from helpers.trackers import client, history_steps, runs_of, the_run, wandb_records

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def queue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def test_a_run_dir_with_a_queued_job_refuses_a_second_submission_and_keeps_the_first_config(tmp_path):
    run_dir = tmp_path / "run"
    first = primus(tmp_path, f"hydra.run.dir={run_dir}", *FAST, *SLURM, "module.lr=1e-3", "launch.wait=false",
                   HELD_IN_QUEUE)
    assert first.returncode == 0, first.stderr[-3000:]
    job_id = submission(run_dir)["job_id"]
    try:
        kept = {name: (run_dir / name).read_bytes()
                for name in (".primus/job_config.yaml", ".primus/slurm_job.json", ".hydra/overrides.yaml")}
        second = primus(tmp_path, f"hydra.run.dir={run_dir}", *FAST, *SLURM, "module.lr=3e-3", "launch.wait=false")
        assert second.returncode == 2
        assert error_lines(second.stderr) == [
            f"error: run dir {run_dir}: slurm job {job_id} is still PENDING (BeginTime) there, with its own config; "
            f"wait for it to end, stop it with: scancel {job_id}, or choose another hydra.run.dir"]
        assert {name: (run_dir / name).read_bytes() for name in kept} == kept  # not a byte rewritten
        assert queued_jobs_from(tmp_path) == [job_id]
        assert "lr: 0.001" in kept[".primus/job_config.yaml"].decode()
    finally:
        scancel(job_id)
    wait_until(lambda: job_id not in squeue_job_ids() or "CANCELLED" in queue_state(job_id), timeout_s=30)

    # once that job is over, the run dir takes a new one; the first job's config and record stay, under its id
    third = primus(tmp_path, f"hydra.run.dir={run_dir}", *FAST, *SLURM, "module.lr=3e-3", "launch.wait=false",
                   HELD_IN_QUEUE)
    assert third.returncode == 0, third.stderr[-3000:]
    scancel(submission(run_dir)["job_id"])
    assert (run_dir / f".primus/job_config.{job_id}.yaml").read_bytes() == kept[".primus/job_config.yaml"]
    assert (run_dir / f".primus/slurm_job.{job_id}.json").read_bytes() == kept[".primus/slurm_job.json"]
    assert submission(run_dir)["job_id"] != job_id and "lr: 0.003" in (run_dir / ".primus/job_config.yaml").read_text()


def test_a_slurm_requeue_of_a_running_job_resumes_from_its_checkpoint_with_one_metrics_record_per_step(
        tmp_path, local_curve):
    """`scontrol requeue` reruns the job as Slurm's own requeue after a node failure does: submitit's attempt 0
    again, SLURM_RESTART_COUNT=1. The waiting command shows the requeue and the job ends on the local curve; its
    trackers (MLflow, W&B offline) hold one run across both attempts, each step once."""
    iters = 24
    run_dir = tmp_path / "run"
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trackers = ("logger=many", "logger.use=[mlflow,wandb]", "logger.wandb.mode=offline", "logger.timeout_s=30",
                f"logger.mlflow.tracking_uri={store}", "logger.mlflow.experiment_name=requeue")
    waiting = WaitingCommand(tmp_path, f"hydra.run.dir={run_dir}", f"module.train_iters={iters}", *FAST, *SLURM,
                             *LONGER_STEPS, "module.checkpoint.interval=2", *trackers)
    try:
        waiting.wait_for_line("submitted slurm job")
        job_id = submission(run_dir)["job_id"]
        metrics = run_dir / "metrics.jsonl"
        wait_until(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 5 and
                   (run_dir / "checkpoints").is_dir(), timeout_s=120)
        subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30, capture_output=True)
        assert waiting.wait() == 0, waiting.stderr[-3000:]
    finally:
        waiting.stop()
    states = re.findall(rf"\[slurm\] job {job_id} \[run\]: (\w+)", waiting.stderr)
    assert states[-1] == "COMPLETED" and states.count("RUNNING") == 2
    assert f"[slurm] job {job_id} [run]: PENDING (BeginTime), requeued\n" in waiting.stderr  # as it happened
    assert sacct_state(job_id) == "COMPLETED"
    log = (Path(submission(run_dir)["submitit_folder"]) / f"{job_id}_0_log.err").read_text()
    assert "attempt 0: restart 1," in log  # Slurm's rerun: submitit's attempt counter is still 0
    resumed = re.search(r"resumed from \S+/step_(\d+) at step (\d+)", (run_dir / "logs" / "rank_0.log").read_text())
    assert resumed and 2 <= int(resumed.group(2)) < iters
    steps = [record["step"] for record in map(json.loads, metrics.read_text().splitlines())]
    assert steps == list(range(1, iters + 1))  # the redone steps replaced their first records
    assert_same_curve(losses(run_dir), local_curve(iters, *LONGER_STEPS))
    (run,) = runs_of(store, "requeue")  # the rerun continued the first attempt's tracker runs
    assert run.info.status == "FINISHED"
    assert [metric.step for metric in client(store).get_metric_history(run.info.run_id, "loss")] == steps
    logs = [records for records in wandb_records(run_dir) if records]
    assert len({the_run(records)["run_id"] for records in logs}) == 1
    assert sorted(step for records in logs for step in history_steps(records)) == steps


def job_logs(run_dir: Path, tail: int = 1500) -> str:
    """The end of each log a failed job left (submitit's, each rank's): what a failure's report needs."""
    logs = sorted((run_dir / ".submitit").glob("*/*.err")) + sorted((run_dir / "logs").glob("*.log"))
    return "".join(f"\n--- {log}\n{log.read_text(errors='replace')[-tail:]}" for log in logs)


def test_a_node_failure_requeues_the_job_and_the_rerun_resumes_from_its_checkpoint(tmp_path, local_curve):
    """n2's slurmd is killed while rank 1 (on n2) is stuck after step 5: Slurm marks the job NODE_FAIL and
    requeues it itself (submitit's attempt 0 again); the waiting command shows it pending on the down node, and
    once n2 is back the rerun resumes from step 4's checkpoint and ends on the uninterrupted curve (~1 min: the
    controller takes SlurmdTimeout=15 s and a ping to find the node gone)."""
    iters = 8
    run_dir = tmp_path / "run"
    waiting = WaitingCommand(tmp_path, f"hydra.run.dir={run_dir}", f"module.train_iters={iters}", *FAST, *SLURM,
                             "launch.nnodes=2", "module.checkpoint.interval=2", env={"PRIMUS_FAULT": "hang:1:5"})
    job_id = None
    try:
        waiting.wait_for_line("submitted slurm job")
        job_id = submission(run_dir)["job_id"]
        wait_until(lambda: (run_dir / "checkpoints" / "step_0000004").is_dir() and
                   len((run_dir / "metrics.jsonl").read_text().splitlines()) >= 5, timeout_s=120)
        with failed_node("n2"):
            # slurmctld's reason while a node the job needs is down (ReqNodeNotAvail, in words)
            waiting.wait_for_match(rf"job {job_id} \[run\]: PENDING \((ReqNodeNotAvail|Nodes required for job are "
                                   "DOWN)", timeout_s=120)
        assert waiting.wait() == 0, waiting.stderr[-3000:] + job_logs(run_dir)
    finally:
        waiting.stop()
        if job_id and job_id in squeue_job_ids():
            scancel(job_id)
    states = re.findall(rf"\[slurm\] job {job_id} \[run\]: (\w+)", waiting.stderr)
    assert states[-1] == "COMPLETED" and states.count("RUNNING") == 2
    assert f"[slurm] job {job_id} [run]: PENDING (BeginTime), requeued after NODE_FAIL" in waiting.stderr
    assert sacct_state(job_id) == "COMPLETED"
    log = (Path(submission(run_dir)["submitit_folder"]) / f"{job_id}_0_log.err").read_text()
    assert "attempt 0: restart 1," in log
    assert "resumed from" in (run_dir / "logs" / "rank_0.log").read_text()
    steps = [record["step"] for record in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]
    assert steps == list(range(1, iters + 1))  # step 5, redone, has one record
    assert_same_curve(losses(run_dir), local_curve(iters))


@pytest.mark.parametrize("request_, line", [
    (["launch.nnodes=5"],
     "error: launch.nnodes=5: partition debug has 2 node(s) that could hold this job's share (sinfo), so it would "
     "wait in the queue forever; ask for at most 2 node(s) or choose another hydra.launcher.partition"),
    (["hydra.launcher.cpus_per_task=4"],
     "error: hydra.launcher.cpus_per_task=4 x 1 task(s) per node: the job needs 4 CPUs per node, and no node of "
     "partition debug has that many (the most is 2, sinfo); ask for at most 2 or choose another "
     "hydra.launcher.partition"),
    (["hydra.launcher.mem_gb=64"],
     "error: hydra.launcher.mem_gb=64: the job needs 65536 MB of memory per node, and no node of partition debug "
     "has that many (the most is 8000, sinfo); ask for at most 8000 or choose another hydra.launcher.partition"),
    (["hydra.launcher.partition=nosuch"],
     "error: hydra.launcher.partition=nosuch: no such partition (sinfo lists: debug); choose one of those"),
], ids=["nodes", "cpus", "memory", "partition"])
def test_a_request_the_partition_cannot_hold_is_refused_before_anything_is_written_or_queued(tmp_path, request_,
                                                                                             line):
    result = primus(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", *FAST, *SLURM, *request_)
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [line])
    assert not accounted_jobs_from(tmp_path) and not (tmp_path / "run").exists()


@pytest.mark.parametrize("limits, line", [
    (["hydra.launcher.timeout_min=0"],
     "error: hydra.launcher.timeout_min=0: the job's time limit must be a positive number of minutes (Slurm would "
     "read 0 as no limit at all and a negative one as thousands of years); give the minutes the run needs, e.g. "
     "hydra.launcher.timeout_min=60"),
    (["hydra.launcher.timeout_min=-5"],
     "error: hydra.launcher.timeout_min=-5: the job's time limit must be a positive number of minutes (Slurm would "
     "read 0 as no limit at all and a negative one as thousands of years); give the minutes the run needs, e.g. "
     "hydra.launcher.timeout_min=60"),
    (["hydra.launcher.timeout_min=1"],
     "error: hydra.launcher.signal_delay_s=120: the checkpoint-and-requeue notice would come 120 s before the end of "
     "a 1 min time limit, leaving each run (the first and each of the max_num_timeout=3 requeues) less than half of "
     "it to train; set signal_delay_s to at most 30 or hydra.launcher.timeout_min to at least 4"),
], ids=["zero", "negative", "notice_longer_than_half"])
def test_a_time_limit_that_leaves_no_time_to_train_is_refused_before_anything_is_queued(tmp_path, limits, line):
    result = primus(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", *FAST, *SLURM, *limits)
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [line])
    assert not accounted_jobs_from(tmp_path) and not (tmp_path / "run").exists()


def test_a_pending_reason_that_never_resolves_ends_the_wait_with_the_scancel_line(tmp_path):
    """More CPUs per task than any node has, asked through a raw sbatch flag the pre-check does not read: sbatch
    accepts it, and it would wait forever (PartitionConfig)."""
    run_dir = tmp_path / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", *FAST, *SLURM,
                    "+hydra.launcher.additional_parameters.cpus_per_task=8", timeout=60)
    job_id = submission(run_dir)["job_id"]
    try:
        assert result.returncode == 1, result.stderr[-3000:]
        assert f"[slurm] job {job_id} [run]: PENDING (PartitionConfig)" in result.stderr
        assert error_lines(result.stderr) == [
            f"error: slurm job {job_id} [run] can never start: it is pending with reason PartitionConfig (it asks for "
            f"more than its partition, account or QOS allows); it stays queued until you stop it with: "
            f"scancel {job_id}"]
        assert queue_state(job_id) == "PENDING|PartitionConfig"
    finally:
        scancel(job_id)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_ends_the_wait_like_ctrl_c_and_leaves_the_job_queued(tmp_path, signum):
    run_dir = tmp_path / "run"
    waiting = WaitingCommand(tmp_path, f"hydra.run.dir={run_dir}", *FAST, *SLURM, HELD_IN_QUEUE)
    job_id = None
    try:
        waiting.wait_for_line("PENDING (BeginTime)")
        job_id = submission(run_dir)["job_id"]
        waiting.send(signum)
        assert waiting.wait(timeout_s=30) == 128 + signum
        assert error_lines(waiting.stderr) == [
            f"error: stopped waiting ({signum.name}); the job(s) keep running: follow them with task=status, stop "
            f"them with: scancel {job_id}"]
        assert queue_state(job_id) == "PENDING|BeginTime"
    finally:
        waiting.stop()
        if job_id:
            scancel(job_id)


def test_status_with_accounting_unreachable_says_sacct_failed_and_exits_non_zero(tmp_path):
    run_dir = tmp_path / "runs" / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", *FAST, *SLURM, "launch.wait=false", HELD_IN_QUEUE)
    assert result.returncode == 0, result.stderr[-3000:]
    job_id = submission(run_dir)["job_id"]
    scancel(job_id)
    # the same cluster, with slurmdbd's port closed: sacct cannot reach accounting (nothing shared is stopped)
    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"(?m)^AccountingStoragePort=\d+$", "AccountingStoragePort=1",
                           Path(slurm_conf_path()).read_text()))
    status = primus(tmp_path, "task=status", f"task.runs={tmp_path / 'runs'}", env={"SLURM_CONF": str(conf)})
    assert status.returncode == 1
    (row,) = status.stdout.strip().splitlines()[1:]
    assert row.split()[:4] == [job_id, "UNKNOWN", "(sacct", "failed)"] and row.endswith(str(run_dir))
    (line,) = status.stderr.strip().splitlines()
    assert re.fullmatch(r"error: sacct failed \(exit 1\): .*Connection refused: the Slurm states above are unknown "
                        r"\(steps and losses are the run dirs'\); check that slurmctld and slurmdbd run, then ask "
                        r"again", line), line


def test_a_submission_sbatch_refuses_is_one_line_and_leaves_nothing_behind(tmp_path):
    run_dir = tmp_path / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", *FAST, *SLURM,
                    "+hydra.launcher.additional_parameters.mem_per_cpu=1000000")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: sbatch refused the job: Memory specification can not be satisfied; Batch job submission failed: "
        "Requested node configuration is not available; nothing of it was queued; fix the request "
        "(hydra.launcher.*) and submit again"]
    # Hydra's record of the command only: no job config, no submitit folder (sbatch script, pickle)
    assert sorted(path.name for path in run_dir.iterdir()) == [".hydra", "primus.log"]
    assert not queued_jobs_from(tmp_path)
