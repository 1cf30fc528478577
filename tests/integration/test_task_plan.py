"""task=plan on the command line: the plan as JSON on stdout, no torch import, no files, bad input in one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.cli import REPORTING_TORCH
from helpers.compose import REPO

FAKE_8_GPU_NODE = {"PRIMUS_AUTO_NUM_GPUS": "8", "PRIMUS_AUTO_FREE_VRAM_GB": "80", "PRIMUS_AUTO_PER_JOB_GB": "4",
                   "PRIMUS_AUTO_VCPUS": "176", "PRIMUS_AUTO_RAM_GB": "2000"}


def primus_plan(cwd, *args, env=None):
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("PRIMUS_AUTO_") and k not in ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS")}
    full_env["PYTHONPATH"] = str(REPO / "src")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", REPORTING_TORCH, *args], capture_output=True, text=True, cwd=cwd,
                          env=full_env, timeout=120)


def test_plan_prints_the_resolved_plan_as_json_and_writes_nothing(tmp_path):
    result = primus_plan(tmp_path, "task=plan", "launch.nproc_per_node=auto", "module.micro_batch_size=1",
                         env=FAKE_8_GPU_NODE)
    assert result.returncode == 0, result.stderr[-2000:]
    plan = json.loads(result.stdout)
    assert plan["nproc_per_node"] == 8 and plan["auto"]["launch.nproc_per_node"] is True
    assert plan["per_job_source"] == "env" and plan["jobs_per_gpu"] == 1  # one point: one job on each of the 8 GPUs
    assert plan["resources"]["vcpus"] == 176 and len(plan["resources"]["gpus"]) == 8
    assert "TORCH_IMPORTED=False" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_plan_on_this_machine_needs_no_overrides(tmp_path):
    result = primus_plan(tmp_path, "task=plan")
    assert result.returncode == 0, result.stderr[-2000:]
    plan = json.loads(result.stdout)
    assert plan["nproc_per_node"] == 1 and plan["threads_per_worker"] >= 1 and plan["parallel_jobs"] == 1
    assert "TORCH_IMPORTED=False" in result.stderr


def test_plan_of_a_sweep_plans_for_all_its_points(tmp_path):
    result = primus_plan(tmp_path, "-m", "task=plan", "launch.nproc_per_node=1", "module.lr=1e-3,2e-3,3e-3",
                         "model=llama_tiny,moe_tiny", env={**FAKE_8_GPU_NODE, "TMPDIR": str(tmp_path / "tmp")})
    assert result.returncode == 0, result.stderr[-2000:]
    points = [json.loads(line) for line in result.stdout.splitlines()]
    assert [p["point"]["num"] for p in points] == list(range(6))
    assert {p["sweep_points"] for p in points} == {6} and {p["parallel_jobs"] for p in points} == {6}
    assert "TORCH_IMPORTED=False" in result.stderr
    assert list(tmp_path.iterdir()) == []  # a plan writes nothing, not even Hydra's multirun.yaml


def test_a_sweep_plan_is_the_plan_hydras_own_sweeper_and_launcher_give(tmp_path):
    """Points planned in one process, from the first point's config where only values differ, print exactly what
    Hydra's basic sweeper and launcher (each point composed from scratch) print."""
    sweep = ["-m", "task=plan", "module.lr=1e-3,2e-3", "module.micro_batch_size=1,2", "model=llama_tiny,moe_tiny"]
    env = {**FAKE_8_GPU_NODE, "TMPDIR": str(tmp_path / "tmp")}
    del env["PRIMUS_AUTO_PER_JOB_GB"]  # sized by each point's own estimate
    ours = primus_plan(tmp_path, *sweep, env=env)
    hydras = primus_plan(tmp_path, *sweep, "hydra/sweeper=basic", "hydra/launcher=basic", env=env)
    assert ours.returncode == 0 and hydras.returncode == 0, ours.stderr[-2000:] + hydras.stderr[-2000:]
    points = [json.loads(line) for line in ours.stdout.splitlines()]
    assert len(points) == 8 and {p["per_job_gib"] for p in points} != {points[0]["per_job_gib"]}  # the sizes differ
    assert ours.stdout == hydras.stdout.replace(", \"hydra/sweeper=basic\", \"hydra/launcher=basic\"", "")


def test_reading_only_the_first_line_of_a_sweep_plan_ends_quietly(tmp_path):
    env = {**FAKE_8_GPU_NODE, "TMPDIR": str(tmp_path / "tmp")}
    command = [sys.executable, "-m", "primus_hydra", "-m", "task=plan", "module.lr=range(1,200)"]
    reader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                              env={**os.environ, **env, "PYTHONPATH": str(REPO / "src")})
    first = reader.stdout.readline()
    reader.stdout.close()  # what `| head -1` does
    stderr = reader.stderr.read().decode()
    assert reader.wait(timeout=60) == 141  # 128 + SIGPIPE, like any shell tool whose reader went away
    assert json.loads(first)["point"]["num"] == 0 and stderr == ""


@pytest.mark.parametrize("args, env, line", [
    (["launch.nproc_per_node=atuo"], {}, "error: launch.nproc_per_node=atuo: must be 'auto' or an integer >= 1"),
    (["module.data.num_workers=-2"], {}, "error: module.data.num_workers=-2: must be 'auto' or an integer >= 0"),
    (["module.data.num_workers=many"], {}, "error: module.data.num_workers=many: must be 'auto' or an integer >= 0"),
    (["sweep.max_parallel=0"], {}, "error: sweep.max_parallel=0: must be 'auto' or an integer >= 1"),
    ([], {"PRIMUS_AUTO_VCPUS": "-4"}, "error: PRIMUS_AUTO_VCPUS=-4: must be an integer > 0"),
    ([], {"PRIMUS_AUTO_PER_JOB_GB": "big"}, "error: PRIMUS_AUTO_PER_JOB_GB=big: must be a number > 0"),
    ([], {"TORCHINDUCTOR_COMPILE_THREADS": "autoish"},
     "error: TORCHINDUCTOR_COMPILE_THREADS=autoish: must be 'auto' or an integer >= 1"),
    ([], {"PRIMUS_AUTO_NUM_GPUS": "2", "CUDA_VISIBLE_DEVICES": "1,4"},
     "error: CUDA_VISIBLE_DEVICES=1,4 names device(s) 4 that this machine does not have; PRIMUS_AUTO_NUM_GPUS lists 2 GPU(s): 0, 1"),
], ids=["nproc_misspelled", "workers_negative", "workers_text", "max_parallel_zero", "vcpus_negative", "per_job_text",
        "compile_threads_text", "mask_absent_device"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, env, line):
    result = primus_plan(tmp_path, "task=plan", *args, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert errors == [line] and result.stdout == ""


def test_a_job_too_large_for_the_gpu_is_refused_unless_the_user_insists(tmp_path):
    gpu = {"PRIMUS_AUTO_NUM_GPUS": "1", "PRIMUS_AUTO_FREE_VRAM_GB": "24", "PRIMUS_AUTO_RAM_GB": "200"}
    refused = primus_plan(tmp_path, "task=plan", "model=llama3_8b", "launch.nproc_per_node=1", env=gpu)
    assert refused.returncode == 2 and refused.stdout == ""
    (error,) = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith("error: the job does not fit in GPU memory: each rank needs about ")
    assert "but GPU 0 has 24.0 GiB free" in error

    result = primus_plan(tmp_path, "task=plan", "model=llama3_8b", "launch.nproc_per_node=1",
                         "launch.allow_oversubscribe=true", env=gpu)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["jobs_per_gpu"] == 1
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: the per-job estimate ") and "exceeds the usable free memory" in warning


def test_a_run_reports_its_plan_and_its_process_gets_the_planned_threads(tmp_path):
    """The in-process run: the thread variables are set before torch is imported, so torch starts with them."""
    run_dir = tmp_path / "run"
    result = primus_plan(tmp_path, f"hydra.run.dir={run_dir}", "module.train_iters=1", "module.warmup_iters=0",
                         "module.checkpoint.interval=0", "module.checkpoint.save_final=false", "module.log.plot=false",
                         "module.log.tensorboard=false", env={"PRIMUS_AUTO_VCPUS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resource plan: 0 GPU(s) [free GiB: -], 1 vCPU(s)" in result.stderr
    saved = json.loads((run_dir / "resources.json").read_text())
    assert saved["threads_per_worker"] == 1 and saved["worker_env"]["OMP_NUM_THREADS"] == "1"
    assert "| threads 1 |" in (run_dir / "logs" / "rank_0.log").read_text()
