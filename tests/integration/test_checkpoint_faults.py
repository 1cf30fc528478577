"""Checkpoints under real faults, end to end: a run SIGKILLed at each instant of a save (PRIMUS_FAULT, in a CLI
process) continues with module.checkpoint.resume=auto on the uninterrupted loss curve, bitwise; so does a job
restarted by the agent (launch.max_restarts); a corrupt step is refused or, with auto, skipped; a full disk (a real
tmpfs) is one line that leaves `latest` and the disk as they were; a checkpoint dir that cannot be written stops
the job before it starts."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.compose import run_job
from helpers.overrides import QUIET_LOGS
from primus_hydra.backends.common.checkpoint import CheckpointManager
from primus_hydra.backends.common.metrics import read_metrics
from primus_hydra.errors import CheckpointError, ConfigValidationError

# llama_tiny cut to one layer (0.86M parameters: 10.3 MB checkpoints), 3 steps of 8 x 32 tokens, a checkpoint after each
SMALL = ["model.num_layers=1", "module.train_iters=3", "module.warmup_iters=1", "module.micro_batch_size=2",
         "module.global_batch_size=8", "module.seq_length=32", "module.log.interval=1", *QUIET_LOGS,
         "module.checkpoint.interval=1"]
AUTO = "module.checkpoint.resume=auto"


def curve(run_dir: Path) -> dict[int, tuple[float, float]]:
    """step -> (loss, grad_norm); a step logged twice (before a crash, then after the resume) counts as its last."""
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in read_metrics(run_dir / "metrics.jsonl")}


def rank0_log(run_dir: Path) -> str:
    return (run_dir / "logs" / "rank_0.log").read_text()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, tuple[float, float]]:
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    result = primus(f"hydra.run.dir={run_dir}", *SMALL, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return curve(run_dir)


def resume_in_process(compose_config, run_dir: Path, *overrides: str):
    return run_job(compose_config(*SMALL, AUTO, *overrides), run_dir)


# (kind, step): where rank 0 dies -> what it leaves in checkpoints/ -> the step resume=auto continues from and the
# warning it gives (None: none)
CRASH_WINDOWS = {
    "first_save_shards_written": ("kill_during_save", 1, [".tmp-step_0000001"], None, None),
    "first_save_renamed_no_latest_yet": ("kill_after_rename", 1, ["step_0000001"], 1, "`latest` is missing"),
    "before_the_step_rename": ("kill_before_rename", 2, [".tmp-step_0000002", "latest", "step_0000001"], 1, None),
    "after_the_step_rename": ("kill_after_rename", 2, ["latest", "step_0000001", "step_0000002"], 2,
                              "`latest` names step_0000001, but step_0000002 is newer"),
    "before_the_latest_replace": ("kill_before_latest", 2, [".latest.tmp", "latest", "step_0000001", "step_0000002"], 2,
                                  "`latest` names step_0000001, but step_0000002 is newer"),
    "after_the_latest_replace": ("kill_after_latest", 2, ["latest", "step_0000001", "step_0000002"], 2, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("window", list(CRASH_WINDOWS))
def test_a_crash_at_any_instant_of_a_save_resumes_with_auto_on_the_same_curve(compose_config, tmp_path, uninterrupted, window):
    kind, step, left, resumed_at, warning = CRASH_WINDOWS[window]
    run_dir = tmp_path / "run"
    crashed = primus(f"hydra.run.dir={run_dir}", *SMALL, cwd=tmp_path, env={"PRIMUS_FAULT": f"{kind}:0:{step}"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == left
    resume_in_process(compose_config, run_dir)
    assert curve(run_dir) == uninterrupted
    log = rank0_log(run_dir)
    if resumed_at is None:  # no step was complete: training starts over, appending to the crashed run's metrics
        assert "resumed from" not in log
    else:
        assert f"resumed from {run_dir / 'checkpoints' / f'step_{resumed_at:07d}'} at step {resumed_at}" in log
    warnings = [line for line in log.splitlines() if "[WARNING]" in line and "resume=auto" in line]
    if warning is None:
        assert warnings == []
    else:
        (line,) = warnings
        assert f"module.checkpoint.resume=auto: {warning}" in line
        assert line.endswith(f"resuming from step_{resumed_at:07d}, the newest step that verifies")
    assert CheckpointManager(run_dir / "checkpoints").latest().name == "step_0000003"


@pytest.mark.slow
def test_max_restarts_continues_after_rank_0_died_between_the_rename_and_latest(tmp_path, uninterrupted):
    run_dir = tmp_path / "run"
    result = primus(f"hydra.run.dir={run_dir}", *SMALL, "launch.nproc_per_node=2", "launch.max_restarts=1",
                    cwd=tmp_path, env={"PRIMUS_FAULT": "kill_after_rename:0:2"})
    assert result.returncode == 0, result.stderr[-3000:]
    restarted = curve(run_dir)
    assert list(restarted) == list(uninterrupted)
    for step, (loss, _) in uninterrupted.items():  # two processes reduce in another order: not bitwise
        assert restarted[step][0] == pytest.approx(loss, rel=1e-4)
    assert f"resumed from {run_dir / 'checkpoints' / 'step_0000002'} at step 2" in rank0_log(run_dir)


def test_a_flipped_bit_is_refused_by_name_and_auto_falls_back_to_the_previous_step(compose_config, tmp_path, uninterrupted):
    run_dir = tmp_path / "run"
    run_job(compose_config(*SMALL), run_dir)
    checkpoints = run_dir / "checkpoints"
    (shard,) = (checkpoints / "step_0000003").glob("*.distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x10
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{shard} is corrupt: its checksum is xxh3_64:[0-9a-f]{{16}}, meta.json recorded"):
        run_job(compose_config(*SMALL, f"module.checkpoint.resume={checkpoints}"), tmp_path / "elsewhere")
    resume_in_process(compose_config, run_dir)
    assert curve(run_dir) == uninterrupted
    assert "step_0000003 failed verification" in rank0_log(run_dir)
    assert (checkpoints / "step_0000003.corrupt").is_dir() and (checkpoints / "latest").read_text() == "step_0000003\n"


@pytest.fixture
def tmpfs(tmp_path):
    """A real, small filesystem: mounted for the test, unmounted after it."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()

    def mount(*options: str) -> Path:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(mount_point)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or result.returncode}): needs root")
        return mount_point

    yield mount
    subprocess.run(["umount", str(mount_point)], capture_output=True)


def test_a_full_disk_is_one_line_that_removes_the_partial_save_and_keeps_latest(compose_config, tmp_path, tmpfs, uninterrupted):
    disk = tmpfs("size=16m")  # room for one checkpoint (10.3 MB), not two
    run_dir = tmp_path / "run"
    with pytest.raises(CheckpointError) as error:
        run_job(compose_config(*SMALL, f"module.checkpoint.dir={disk}"), run_dir)
    assert str(error.value) == (
        f"module.checkpoint.dir={disk}: saving step 2 failed (No space left on device); the partial save was removed "
        f"and `latest` still names step_0000001; free space or choose another module.checkpoint.dir, then continue "
        f"with module.checkpoint.resume=auto"
    )
    assert sorted(p.name for p in disk.iterdir()) == ["latest", "step_0000001"]
    assert shutil.disk_usage(disk).used < 11e6
    subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # room made
    resume_in_process(compose_config, run_dir, f"module.checkpoint.dir={disk}")
    assert curve(run_dir) == uninterrupted
    assert json.loads((disk / "step_0000003" / "meta.json").read_text())["step"] == 3


def test_a_read_only_checkpoint_dir_stops_the_job_before_it_starts(compose_config, tmp_path, tmpfs):
    disk = tmpfs("ro", "size=1m")
    with pytest.raises(ConfigValidationError) as error:
        run_job(compose_config(*SMALL, f"module.checkpoint.dir={disk / 'ckpt'}"), tmp_path / "run")
    assert str(error.value) == (
        f"module.checkpoint.dir={disk / 'ckpt'}: {disk} is not writable (a read-only file system); checkpoints need a "
        f"folder this run can write or create; choose another module.checkpoint.dir (null: <run_dir>/checkpoints)"
    )
    assert not (tmp_path / "run").exists()
