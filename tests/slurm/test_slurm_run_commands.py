"""task=logs and task=cancel against submitted jobs (launch.wait=false) on the local Slurm cluster, and the
provenance record a Slurm run gets: written at submission, appended to by the job's start on its node, which runs
the code frozen at submission."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.curves import losses
from helpers.slurm_cluster import sacct_state, squeue_job_ids, wait_until
from helpers.slurm_runs import FAST, HELD_IN_QUEUE, JOB_TIMEOUT_S, SLURM, primus, submission

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_logs_by_job_id_prints_the_jobs_output_and_provenance_records_its_start(tmp_path):
    outputs = tmp_path / "outputs"
    run_dir = outputs / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "module.train_iters=2", *FAST, *SLURM, "launch.wait=false")
    assert result.returncode == 0, result.stderr[-3000:]
    job_id = submission(run_dir)["job_id"]
    wait_until(lambda: sacct_state(job_id) == "COMPLETED", timeout_s=JOB_TIMEOUT_S)

    logs = primus(tmp_path, "task=logs", f"task.run={job_id}", "task.lines=1000", env={"PRIMUS_OUTPUT_ROOT": str(outputs)})
    assert logs.returncode == 0, logs.stderr
    err = f"{submission(run_dir)['submitit_folder']}/{job_id}_0_log.err"
    assert f"==> {err} <==" in logs.stdout and f"[primus] slurm job {job_id} attempt 0" in logs.stdout
    rank = primus(tmp_path, "task=logs", f"task.run={run_dir}", "task.rank=0", "task.lines=1")
    assert rank.stdout.splitlines() == (run_dir / "logs" / "rank_0.log").read_text().splitlines()[-1:]

    record = json.loads((run_dir / ".primus" / "provenance.json").read_text())
    submitted, started = record["starts"]
    assert (submitted["launcher"], submitted["slurm"]) == ("slurm", None)
    assert started["launcher"] == "slurm_srun" and started["slurm"]["job_id"] == job_id


def test_cancel_of_a_queued_job_waits_for_slurm_and_status_says_cancelled_by_user(tmp_path):
    run_dir = tmp_path / "runs" / "run"
    result = primus(tmp_path, f"hydra.run.dir={run_dir}", "module.train_iters=2", *FAST, *SLURM, "launch.wait=false",
                    HELD_IN_QUEUE)
    assert result.returncode == 0, result.stderr[-3000:]
    job_id = submission(run_dir)["job_id"]

    cancel = primus(tmp_path, "task=cancel", f"task.run={run_dir}")
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.strip() == f"cancelled slurm job {job_id}: {run_dir}"
    assert job_id not in squeue_job_ids() or sacct_state(job_id) == "CANCELLED"  # Slurm said so before it returned
    wait_until(lambda: sacct_state(job_id) == "CANCELLED", timeout_s=30)
    status = primus(tmp_path, "task=status", f"task.runs={tmp_path / 'runs'}", "task.format=json")
    (row,) = json.loads(status.stdout)
    assert (row["job_id"], row["state"], row["run_dir"]) == (job_id, "CANCELLED by user", str(run_dir))
    unknown = primus(tmp_path, "task=cancel", "task.run=987654321", env={"PRIMUS_OUTPUT_ROOT": str(tmp_path)})
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: task.run=987654321: no run under ")


# the user's module: in a Slurm job, each import of it leaves a mark saying which text was imported
USER_MODULE = """import os
from pathlib import Path

if os.environ.get("SLURM_JOB_ID"):
    marks = Path.cwd() / "marks"
    marks.mkdir(exist_ok=True)
    (marks / f"{os.environ['SLURM_JOB_ID']}.{os.getpid()}").write_text("VERSION")
"""


def marks(folder: Path, job_id: str) -> set[str]:
    return {path.read_text() for path in (folder / "marks").glob(f"{job_id}.*")}


def test_an_edit_while_the_job_waits_does_not_change_what_it_runs(tmp_path):
    """A copy of the project (a git clone of HEAD) submits a job that waits in the queue; its loss is then doubled
    in the copy's source. The frozen job trains with the submitted code; a job submitted after the edit with
    launch.freeze_code=false runs the edit: its first loss is twice the frozen job's. A requeue of the frozen job
    after the edit runs the frozen copy again. So does the user's own module beside the command (patches.modules):
    each import of it in the job leaves a mark with its text's version."""
    project = tmp_path / "project"
    subprocess.run(["git", "clone", "-q", str(Path(__file__).resolve().parents[2]), str(project)], check=True, timeout=60)
    env = {"PYTHONPATH": str(project / "src")}
    frozen_dir, edited_dir = tmp_path / "frozen", tmp_path / "edited"
    user_module = tmp_path / "acme_mark.py"
    user_module.write_text(USER_MODULE.replace("VERSION", "submitted"))
    run = ["module.train_iters=1", *FAST, *SLURM, "launch.wait=false", "patches.modules=[acme_mark]"]
    result = primus(tmp_path, f"hydra.run.dir={frozen_dir}", *run, HELD_IN_QUEUE, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    record = submission(frozen_dir)
    store = Path(json.loads((frozen_dir / ".primus" / "provenance.json").read_text())["frozen_code"]["path"])
    assert store.parent == frozen_dir / ".primus_code" and (store / "conf" / "config.yaml").is_file()
    script = (Path(record["submitit_folder"]) / f"{record['job_id']}_submission.sh").read_text()
    assert f'export PYTHONPATH="{store / "src"}' in script  # a requeue reruns this script: the same copy
    loss_source = project / "src" / "primus_hydra" / "backends" / "common" / "data.py"  # the native trainer's loss
    source = loss_source.read_text()
    assert source.count("return F.cross_entropy(flat, labels)") == 1
    loss_source.write_text(source.replace("return F.cross_entropy(", "return 2.0 * F.cross_entropy("))
    user_module.write_text(USER_MODULE.replace("VERSION", "edited"))
    result = primus(tmp_path, f"hydra.run.dir={edited_dir}", *run, "launch.freeze_code=false", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    frozen_id, edited_id = submission(frozen_dir)["job_id"], submission(edited_dir)["job_id"]
    subprocess.run(["scontrol", "update", f"JobId={frozen_id}", "StartTime=now"], check=True, timeout=30)
    wait_until(lambda: {sacct_state(frozen_id), sacct_state(edited_id)} == {"COMPLETED"}, timeout_s=JOB_TIMEOUT_S)
    assert losses(edited_dir)[1] == pytest.approx(2 * losses(frozen_dir)[1], rel=1e-5)
    assert marks(tmp_path, frozen_id) == {"submitted"} and marks(tmp_path, edited_id) == {"edited"}
    first = losses(frozen_dir)[1]
    # Slurm reruns the same script after the edit: the same frozen copy, the same loss (no checkpoint: step 1 again)
    subprocess.run(["scontrol", "requeue", frozen_id], check=True, timeout=30)
    provenance = frozen_dir / ".primus" / "provenance.json"
    wait_until(lambda: len(json.loads(provenance.read_text())["starts"]) == 3 and sacct_state(frozen_id) == "COMPLETED",
               timeout_s=JOB_TIMEOUT_S)
    rerun = json.loads(provenance.read_text())["starts"][-1]
    assert rerun["slurm"]["restart_count"] == 1 and rerun["code_path"] == str(store / "src" / "primus_hydra")
    assert losses(frozen_dir)[1] == pytest.approx(first, rel=1e-6)
    assert marks(tmp_path, frozen_id) == {"submitted"} and len(list((tmp_path / "marks").glob(f"{frozen_id}.*"))) >= 2
    assert json.loads(provenance.read_text())["frozen_code"]["user_packages"] == {"acme_mark": str(user_module)}
    edited = json.loads((edited_dir / ".primus" / "provenance.json").read_text())
    assert edited["frozen_code"] == {"frozen": False, "why": "launch.freeze_code=false"}
    assert edited["starts"][-1]["code_path"] == str(project / "src" / "primus_hydra")


def test_cancel_by_array_id_cancels_every_point_and_a_sweep_missing_a_point_is_refused(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = primus(tmp_path, "-m", f"hydra.sweep.dir={sweep_dir}", "module.train_iters=2", *FAST, *SLURM,
                    "launch.wait=false", HELD_IN_QUEUE, "module.seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    ids = [submission(sweep_dir / str(num))["job_id"] for num in (0, 1)]
    cancel = primus(tmp_path, "task=cancel", f"task.run={ids[0].split('_')[0]}", env={"PRIMUS_OUTPUT_ROOT": str(tmp_path)})
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.splitlines() == [f"cancelled slurm job {job_id}: {sweep_dir / str(num)}"
                                          for num, job_id in enumerate(ids)]
    shutil.rmtree(sweep_dir / "1")
    logs = primus(tmp_path, "task=logs", f"task.run={sweep_dir}")
    assert logs.returncode == 2
    assert logs.stderr.strip() == (f"error: task.run={sweep_dir}: the sweep submitted 2 points but 1 of their run dirs "
                                   "are there; give one point's run dir, or the Slurm job id of the array")
