"""Checkpoint integrity (backends/common/checkpoint.py, checkpoint_paths.py) on real DCP checkpoints of a tiny
model, without training: every file's checksum recorded while it is written, a damaged file refused naming it,
resume=auto falling back to the newest step that verifies (with a warning) and never starting over on top of
steps, `latest` only ever naming a sibling step folder, meta.json of any shape one line, a save that runs out of
room (a real file-size limit) removed with `latest` intact, and the checkpoint dir checked when the job is
prepared."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
xxhash = pytest.importorskip("xxhash")

from primus_hydra.backends.common.checkpoint import CheckpointManager  # noqa: E402
from primus_hydra.backends.common.checkpoint_paths import (  # noqa: E402
    META,
    FileRecord,
    file_checksum,
    read_meta,
    records_for_rank,
)
from primus_hydra.backends.fault_injection import FAULT_ENV, inject_fault  # noqa: E402
from primus_hydra.backends.torch.adapter import TorchAdapter  # noqa: E402
from primus_hydra.config.layout import parallel_layout  # noqa: E402
from primus_hydra.errors import CheckpointError  # noqa: E402

KEY = "module.checkpoint.resume"


def tiny_model_and_optimizer(seed: int = 0):
    """64 x 64 weights and AdamW state (one step taken): a few 100 KiB of shards."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    return model, optimizer


def save_steps(root: Path, *steps: int) -> CheckpointManager:
    manager = CheckpointManager(root)
    model, optimizer = tiny_model_and_optimizer()
    for step in steps:
        manager.save(step, model, optimizer, {"step": step, "torch_rng": torch.get_rng_state()}, {"model": "tiny"})
    return manager


def flip_bit(file: Path, offset: int = -1) -> None:
    data = bytearray(file.read_bytes())
    data[offset if offset >= 0 else len(data) // 2] ^= 0x01
    file.write_bytes(bytes(data))


def shard(step_dir: Path) -> Path:
    (found,) = step_dir.glob("*.distcp")
    return found


@pytest.fixture
def saved(tmp_path) -> CheckpointManager:
    """steps 2 and 4 saved, `latest` naming step 4"""
    return save_steps(tmp_path / "run" / "checkpoints", 2, 4)


# -- recorded while written ---------------------------------------------------------------------------------
def test_every_file_of_a_step_is_recorded_with_its_size_checksum_and_writer(saved):
    step = saved.root / "step_0000004"
    meta, records = read_meta(step)
    assert meta["step"] == 4
    assert set(records) == {p.name for p in step.iterdir()} - {META}
    for name, record in records.items():
        data = (step / name).read_bytes()
        assert record == FileRecord(len(data), f"xxh3_64:{xxhash.xxh3_64(data).hexdigest()}", 0)
        assert file_checksum(step / name) == record.checksum


def test_a_step_checked_with_crc32_where_xxhash_was_missing_verifies_and_catches_a_flipped_bit(saved):
    step = saved.root / "step_0000004"
    meta = json.loads((step / META).read_text())
    for name, entry in meta["files"].items():
        entry["checksum"] = f"crc32:{zlib.crc32((step / name).read_bytes()):08x}"
    (step / META).write_text(json.dumps(meta))
    assert saved.find(str(step), KEY) == (step, [])
    flip_bit(shard(step))
    with pytest.raises(CheckpointError, match=r"is corrupt: its checksum is crc32:[0-9a-f]{8}, meta.json recorded crc32:"):
        saved.find(str(step), KEY)


# -- damage is refused, naming the file ---------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["one_bit_in_a_shard", "4KiB_of_garbage_in_a_shard", "one_bit_in_trainer_state",
                                    "one_bit_in_dcp_metadata"])
def test_a_damaged_file_of_a_named_step_is_refused_in_one_line_naming_it(saved, damage):
    step = saved.root / "step_0000004"
    file = {"one_bit_in_trainer_state": step / "trainer_state.pt", "one_bit_in_dcp_metadata": step / ".metadata"}.get(damage, shard(step))
    if damage == "4KiB_of_garbage_in_a_shard":
        with open(file, "r+b") as handle:
            handle.seek(1024)
            handle.write(os.urandom(4096))
    else:
        flip_bit(file)
    with pytest.raises(CheckpointError) as error:
        saved.find(str(step), KEY)
    message = str(error.value)
    assert message.startswith(f"{KEY}={step}: {file} is corrupt: its checksum is xxh3_64:") and "\n" not in message
    assert "module.checkpoint.resume=auto falls back to the newest one that verifies" in message


def test_a_truncated_file_is_refused_by_its_size(saved):
    file = shard(saved.root / "step_0000004")
    file.write_bytes(file.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=rf"{file.name} has 100 bytes, expected \d+ \(truncated or corrupt\)"):
        saved.find(str(saved.root), KEY)


def test_a_checkpoint_recorded_with_sizes_only_is_still_verified_by_size(saved):
    step = saved.root / "step_0000004"
    meta = json.loads((step / META).read_text())
    meta["files"] = {name: entry["size"] for name, entry in meta["files"].items()}
    (step / META).write_text(json.dumps(meta))
    assert saved.find(str(step), KEY) == (step, [])
    flip_bit(shard(step))  # undetectable without a checksum, as before checksums were recorded
    assert saved.find(str(step), KEY) == (step, [])
    shard(step).write_bytes(b"x")
    with pytest.raises(CheckpointError, match="has 1 bytes, expected"):
        saved.find(str(step), KEY)


# -- resume=auto --------------------------------------------------------------------------------------------
def test_resume_auto_falls_back_past_a_corrupt_step_with_a_warning_and_moves_it_aside(saved):
    flip_bit(shard(saved.root / "step_0000004"))
    path, warnings = saved.find("auto", KEY)
    assert path == saved.root / "step_0000002"
    (line,) = warnings
    assert line.startswith(f"{KEY}=auto: step_0000004 failed verification (") and "is corrupt: its checksum is" in line
    assert line.endswith("moved it to step_0000004.corrupt and resuming from step_0000002, the newest step that verifies")
    assert saved.steps() == [2] and (saved.root / "step_0000004.corrupt" / META).is_file()


def test_resume_auto_stops_in_one_line_when_no_step_verifies_and_moves_nothing(saved):
    for step in ("step_0000002", "step_0000004"):
        flip_bit(shard(saved.root / step))
    with pytest.raises(CheckpointError) as error:
        saved.find("auto", KEY)
    assert str(error.value).startswith(f"{KEY}=auto: no step in module.checkpoint.dir={saved.root} verifies (the newest, "
                                       f"step_0000004: ")
    assert saved.steps() == [2, 4]


def test_resume_auto_in_an_empty_folder_is_a_fresh_start(tmp_path):
    assert CheckpointManager(tmp_path / "none").find("auto", KEY) == (None, [])


def write_latest(root: Path, content) -> None:
    if content is None:
        (root / "latest").unlink()
    else:
        (root / "latest").write_bytes(content)


LATEST_CASES = {
    # name: (content of `latest`, what resume=auto warns, what resume=<the checkpoints folder> says)
    "missing": (None, "`latest` is missing", "`latest` is missing; give one of its step_* folders (newest: step_0000004)"),
    "empty": (b"\n", "`latest` is empty", "`latest` is empty"),
    "not_utf8": (b"step_\xff\xfe\n", "`latest` is not UTF-8 text", "`latest` is not UTF-8 text"),
    "outside_the_folder": (b"../../x\n", "`latest` holds '../../x', not the name of a step folder beside it",
                           "`latest` holds '../../x', not the name of a step folder beside it"),
    "a_missing_step": (b"step_0000009\n", "`latest` names step_0000009, which is missing or incomplete",
                       "`latest` names step_0000009, which is missing or incomplete"),
    "behind_the_newest_step": (b"step_0000002\n", "`latest` names step_0000002, but step_0000004 is newer (a save was "
                               "interrupted before it updated `latest`)", None),
}


@pytest.mark.parametrize("case", list(LATEST_CASES))
def test_resume_auto_takes_the_newest_verified_step_whatever_latest_says_and_warns(saved, tmp_path, case):
    content, warning, _ = LATEST_CASES[case]
    shutil.copytree(saved.root / "step_0000002", tmp_path / "x")  # a complete checkpoint where ../../x points
    write_latest(saved.root, content)
    path, warnings = saved.find("auto", KEY)
    assert path == saved.root / "step_0000004"
    (line,) = warnings
    assert line.startswith(f"{KEY}=auto: {warning}")
    assert line.endswith("; resuming from step_0000004, the newest step that verifies")


@pytest.mark.parametrize("case", [case for case, (_, _, named) in LATEST_CASES.items() if named])
def test_a_named_checkpoints_folder_with_a_bad_latest_is_one_line(saved, tmp_path, case):
    content, _, named = LATEST_CASES[case]
    shutil.copytree(saved.root / "step_0000002", tmp_path / "x")
    write_latest(saved.root, content)
    with pytest.raises(CheckpointError) as error:
        saved.find(str(saved.root), KEY)
    assert str(error.value).startswith(f"{KEY}={saved.root}: {named}") and "\n" not in str(error.value)


def test_latest_names_only_a_sibling_step_folder(saved, tmp_path):
    shutil.copytree(saved.root / "step_0000002", tmp_path / "step_0000009")
    for outside in (b"../../step_0000009", b"/" + str(tmp_path / "step_0000009").encode(), b"step_0000004/..", b"."):
        write_latest(saved.root, outside)
        assert saved.latest() is None and "not the name of a step folder beside it" in saved.pointer().problem


# -- meta.json of any shape ---------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b"[]", b'{"step": 2}', b'{"step": "2", "files": {}}', b'{"step": 2, "files": 3}',
                                     b'{"step": 2, "files": {"x": 1}}',
                                     b'{"step": 2, "files": {"trainer_state.pt": "12"}}',
                                     b'{"step": 2, "files": {"trainer_state.pt": 1, "../escape": 1}}',
                                     b'{"step": 2, "files": {"trainer_state.pt": {"size": 1, "checksum": "xxh3_64:zz"}}}',
                                     b"\xff\xfe", b"{"])
def test_a_meta_json_of_the_wrong_shape_is_one_line_naming_it(saved, content):
    step = saved.root / "step_0000004"
    (step / META).write_bytes(content)
    with pytest.raises(CheckpointError) as error:
        saved.find(str(step), KEY)
    message = str(error.value)
    assert message.startswith(f"{KEY}={step}: {step / META} ") and "corrupt" in message and "\n" not in message


def test_each_rank_verifies_the_files_its_rank_wrote():
    records = {f"__{rank}_0.distcp": FileRecord(1, None, rank) for rank in range(4)}
    assert list(records_for_rank(records, 0, 2)) == ["__0_0.distcp", "__2_0.distcp"]
    assert list(records_for_rank(records, 1, 2)) == ["__1_0.distcp", "__3_0.distcp"]
    assert list(records_for_rank(records, 0, 1)) == list(records)


# -- a save that fails --------------------------------------------------------------------------------------
def test_a_save_that_runs_out_of_room_is_one_line_removes_its_folder_and_keeps_latest(saved):
    """RLIMIT_FSIZE: the kernel refuses to grow a file past the limit (EFBIG), as a full disk refuses (ENOSPC)."""
    model, optimizer = tiny_model_and_optimizer()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(CheckpointError) as error:
            saved.save(6, model, optimizer, {"step": 6}, {"model": "tiny"})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert str(error.value) == (
        f"module.checkpoint.dir={saved.root}: saving step 6 failed (File too large); the partial save was removed and "
        f"`latest` still names step_0000004; free space or choose another module.checkpoint.dir, then continue with "
        f"module.checkpoint.resume=auto"
    )
    assert sorted(p.name for p in saved.root.iterdir()) == ["latest", "step_0000002", "step_0000004"]
    assert saved.find("auto", KEY) == (saved.root / "step_0000004", [])


def test_an_existing_step_is_never_overwritten(saved):
    model, optimizer = tiny_model_and_optimizer()
    with pytest.raises(CheckpointError, match="step_0000004 already exists; refusing to overwrite it"):
        saved.save(4, model, optimizer, {"step": 4}, {})


# -- fault injection ----------------------------------------------------------------------------------------
def test_an_unknown_fault_kind_is_refused_instead_of_never_firing(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "kill_after_renam:0:4")
    with pytest.raises(ValueError, match=r"PRIMUS_FAULT=kill_after_renam:0:4: unknown kind 'kill_after_renam'"):
        inject_fault("after_rename", 0, 4)


# -- the checkpoint dir, when the job is prepared -----------------------------------------------------------
def checkpoint_dir_failures(compose_config, tmp_path, value: str) -> list[str]:
    cfg = compose_config(f"module.checkpoint.dir={value}")
    adapter = TorchAdapter(cfg, parallel_layout(cfg, 1), tmp_path / "run")
    return [line for line in adapter.training_failures() if line.startswith("module.checkpoint.dir")]


def test_a_checkpoint_dir_that_is_a_file_is_refused_when_the_job_is_prepared(compose_config, tmp_path):
    (tmp_path / "file").write_text("x")
    (line,) = checkpoint_dir_failures(compose_config, tmp_path, str(tmp_path / "file"))
    assert line.startswith(f"module.checkpoint.dir={tmp_path / 'file'}: exists and is not a folder")


def test_a_checkpoint_dir_under_a_device_file_is_refused_when_the_job_is_prepared(compose_config, tmp_path):
    (line,) = checkpoint_dir_failures(compose_config, tmp_path, "/dev/null/ckpt")
    assert line.startswith("module.checkpoint.dir=/dev/null/ckpt: /dev/null is not a folder")


def test_a_checkpoint_dir_to_be_created_in_a_writable_folder_is_fine(compose_config, tmp_path):
    assert checkpoint_dir_failures(compose_config, tmp_path, str(tmp_path / "new" / "deeper")) == []
