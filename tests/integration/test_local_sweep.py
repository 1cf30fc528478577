"""hydra/launcher=primus_local: real sweeps of the tiny model on this machine, run through the CLI.

PRIMUS_AUTO_VCPUS fixes how many points the resource plan lets run at once, whatever the machine has.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.compose import PYTHON, REPO
from helpers.overrides import QUIET_LOGS

pytestmark = pytest.mark.slow  # every test here trains or runs real processes for seconds

FAST = ["hydra/launcher=primus_local", "module.train_iters=3", "module.warmup_iters=1", "module.log.interval=1",
        *QUIET_LOGS, "module.checkpoint.save_final=false", "platform.peak_tflops_per_device=1.0"]


def sweep(tmp_path: Path, *overrides: str, vcpus: int = 2, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRIMUS_AUTO_VCPUS": str(vcpus)}
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PRIMUS_FAULT"):
        env.pop(name, None)
    command = [PYTHON, "-m", "primus_hydra", "-m", *FAST, f"hydra.sweep.dir={tmp_path / 'sweep'}", *overrides]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "sweep" / "summary.json").read_text())


def max_concurrent(points: list) -> int:
    events = sorted([(p["started"], 1) for p in points] + [(p["ended"], -1) for p in points])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def test_four_points_run_two_at_a_time_and_a_failing_point_is_isolated(tmp_path):
    faults = "none:0:1,raise:0:2,kill:0:2,none:0:3"  # the second point raises, the third is killed (SIGKILL)
    result = sweep(tmp_path, f"+platform.env.PRIMUS_FAULT={faults}")

    assert result.returncode == 1, result.stderr
    points = summary(tmp_path)["points"]
    assert [p["status"] for p in points] == ["ok", "failed", "killed", "ok"]
    assert "InjectedFault: injected fault on rank 0 at step 2" in points[1]["error"]
    assert points[2]["error"] == "signal SIGKILL"
    assert all(isinstance(points[i]["objective"], float) for i in (0, 3))
    assert max_concurrent(points) == 2
    first, second = (p["pinning"] for p in points[:2])  # side by side: one core and one thread each, not the same
    assert first.endswith(", OMP_NUM_THREADS=1") and second.endswith(", OMP_NUM_THREADS=1")
    assert first.startswith("cpus ") and second.startswith("cpus ") and first != second
    for point in points:
        run_dir = Path(point["run_dir"])
        assert (run_dir / ".hydra" / "overrides.yaml").is_file()  # Hydra's run_job made the run dir
        log = (run_dir / "point.log").read_text()
        assert log.startswith(f"[primus_local] {point['pinning']}")
        assert "did not take the job prepared" not in log  # the point ran the job its parent prepared
    assert (tmp_path / "sweep" / "resources.json").is_file()
    assert "| point | overrides | status |" in (tmp_path / "sweep" / "summary.md").read_text()
    table = result.stderr[result.stderr.index("point  overrides"):]
    assert [line.split()[2] for line in table.splitlines()[2:6]] == ["ok", "failed:", "killed:", "ok"]
    assert result.stderr.strip().splitlines()[-1].startswith("error: 2 of 4 sweep point(s) failed")
    assert "[4/4 done]" in result.stderr


def test_points_run_one_at_a_time_when_the_plan_fits_one(tmp_path):
    result = sweep(tmp_path, "module.lr=1e-3,2e-3", vcpus=1)

    assert result.returncode == 0, result.stderr
    first, second = summary(tmp_path)["points"]
    assert [first["status"], second["status"]] == ["ok", "ok"]
    assert first["ended"] <= second["started"]
    assert "2 point(s), 1 at a time" in result.stderr


def test_a_bad_point_stops_the_sweep_before_any_point_starts(tmp_path):
    result = sweep(tmp_path, "module.lr=1e-3,1e-9", "module.min_lr=1e-5")

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: [job 1: ") and "module.lr=1e-09" in lines[0]
    assert lines[0].endswith("module.lr=1e-09 is below module.min_lr=1e-05; lr must be >= min_lr")
    assert not (tmp_path / "sweep").exists()  # not even Hydra's multirun.yaml: the sweep never started


def test_a_point_that_breaks_its_backends_rules_stops_the_sweep_before_any_point_starts(tmp_path):
    result = sweep(tmp_path, "backend=torch,maxtext")

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith("error: [job 1: ") and "backend=maxtext]" in line for line in lines)
    assert "module.data.source=text needs module.data.path with backend=maxtext" in lines[0]
    assert not (tmp_path / "sweep").exists()


def test_the_probe_runs_the_first_point_alone_and_tightens_the_plan(tmp_path):
    result = sweep(tmp_path, "sweep.probe=true", "sweep.probe_steps=2", "module.lr=1e-3,2e-3")

    assert result.returncode == 0, result.stderr
    probe_dir = tmp_path / "sweep" / ".probe"
    assert "module.train_iters=2" in (probe_dir / ".hydra" / "overrides.yaml").read_text()
    assert "plan before the probe" in result.stderr and "plan after the probe" in result.stderr
    plan = json.loads((tmp_path / "sweep" / "resources.json").read_text())
    assert plan["per_job_source"] == "probe"
    points = summary(tmp_path)["points"]
    assert probe_dir.stat().st_mtime <= min(p["started"] for p in points) + 1
    assert [p["status"] for p in points] == ["ok", "ok"]


def test_compiled_points_share_one_inductor_cache_that_the_probe_fills_with_more_threads(tmp_path):
    result = sweep(tmp_path, "module.compile=true", "task.dry_run=true", "sweep.probe=true", "module.lr=1e-3,2e-3")

    assert result.returncode == 0, result.stderr
    cache = f"TORCHINDUCTOR_CACHE_DIR={tmp_path / 'sweep' / '.inductor_cache'}"
    probe_log = (tmp_path / "sweep" / ".probe" / "point.log").read_text().splitlines()[0]
    assert probe_log.endswith(f"TORCHINDUCTOR_COMPILE_THREADS=2, {cache}")  # the warmup budget: all 2 vCPUs
    for point in summary(tmp_path)["points"]:
        first_line = (Path(point["run_dir"]) / "point.log").read_text().splitlines()[0]
        assert first_line.endswith(f"TORCHINDUCTOR_COMPILE_THREADS=1, {cache}")  # the plan's: 2 vCPUs / 2 points


def test_a_sweep_launched_in_batches_has_one_summary_of_all_its_points(tmp_path):
    result = sweep(tmp_path, "hydra.sweeper.max_batch_size=2", "task.dry_run=true", "module.lr=1e-3,2e-3,3e-3")

    assert result.returncode == 0, result.stderr
    points = summary(tmp_path)["points"]
    assert [(p["job"], p["status"], p["overrides"]) for p in points] == [
        (0, "ok", ["module.lr=0.001"]), (1, "ok", ["module.lr=0.002"]), (2, "ok", ["module.lr=0.003"])]


@pytest.mark.parametrize("gpus, mask, nproc, expected", [
    (4, {}, 2, ["CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES=2,3"]),  # NVIDIA: nproc_per_node devices each
    (2, {"HIP_VISIBLE_DEVICES": "0,1"}, 1, ["HIP_VISIBLE_DEVICES=0", "HIP_VISIBLE_DEVICES=1"]),  # AMD
])
def test_gpu_slots_give_each_point_its_devices_through_the_vendor_variable(tmp_path, monkeypatch, gpus, mask, nproc,
                                                                           expected):
    monkeypatch.setenv("PRIMUS_AUTO_NUM_GPUS", str(gpus))  # stands in for nvidia-smi / amd-smi (a mask still applies)
    monkeypatch.setenv("PRIMUS_AUTO_FREE_VRAM_GB", "80")
    for name, value in mask.items():
        monkeypatch.setenv(name, value)
    result = sweep(tmp_path, "task.dry_run=true", f"launch.nproc_per_node={nproc}", "module.global_batch_size=16",
                   "module.lr=1e-3,2e-3", vcpus=4)

    assert result.returncode == 0, result.stderr
    pinnings = [point["pinning"].split(",")[0] if nproc == 1 else ",".join(point["pinning"].split(",")[:2])
                for point in summary(tmp_path)["points"]]
    assert pinnings == expected


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_running_points_and_exits_128_plus_its_number(tmp_path, signum, exit_code):
    env = {**os.environ, "PRIMUS_AUTO_VCPUS": "2"}
    env.pop("OMP_NUM_THREADS", None)
    long_points = [item for item in FAST if not item.startswith("module.train_iters=")] + ["module.train_iters=500"]
    command = [PYTHON, "-m", "primus_hydra", "-m", *long_points, f"hydra.sweep.dir={tmp_path / 'sweep'}",
               "module.lr=1e-3,2e-3,3e-3"]
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    started = 0
    while started < 2:
        line = process.stderr.readline()
        assert line, "the sweep ended before two points started"
        started += line.startswith("[start]")
    time.sleep(1.0)
    process.send_signal(signum)
    rest = process.communicate(timeout=60)[1]

    assert process.returncode == exit_code, rest
    points = summary(tmp_path)["points"]
    assert [p["status"] for p in points] == ["interrupted", "interrupted", "not started"]
    for point in points[:2]:  # nothing is left of a point's process group (the point and its workers)
        with pytest.raises(ProcessLookupError):
            os.killpg(point["pid"], 0)


def test_the_launcher_is_listed_among_hydra_plugins():
    result = subprocess.run([PYTHON, "-m", "primus_hydra", "--info", "plugins"], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "PrimusLocalLauncher" in result.stdout
