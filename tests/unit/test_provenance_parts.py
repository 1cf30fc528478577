"""The parts of a run's provenance record read without running anything: the GPU driver from the vendor tools,
git's fields outside a checkout, data fingerprints that never read a .bin, and the frozen copy's size limits."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from test_resources import fake_tool

from primus_hydra.errors import PrimusError
from primus_hydra.launch.data_fingerprint import data_fingerprints
from primus_hydra.launch.provenance import git_state
from primus_hydra.launch.slurm import frozen_code
from primus_hydra.orchestrator.gpu_probe import detect_gpu_driver


def test_the_gpu_driver_comes_from_the_vendor_tools(tmp_path):
    fake_tool(tmp_path / "nv", "nvidia-smi", "550.54.15\n550.54.15")
    assert detect_gpu_driver({"PATH": str(tmp_path / "nv")}) == "550.54.15"
    fake_tool(tmp_path / "amd", "amd-smi", '{"gpu_data": [{"gpu": 0, "driver": {"version": "6.8.5"}}]}')
    assert detect_gpu_driver({"PATH": str(tmp_path / "amd")}) == "6.8.5"
    fake_tool(tmp_path / "rocm", "rocm-smi", '{"system": {"Driver version": "6.3.6"}}')
    assert detect_gpu_driver({"PATH": str(tmp_path / "rocm")}) == "6.3.6"
    assert detect_gpu_driver({"PATH": str(tmp_path / "none")}) is None


def test_outside_a_git_checkout_every_git_field_is_null(tmp_path):
    assert git_state(tmp_path) == {"repo": None, "commit": None, "branch": None, "dirty": None, "untracked": None}


def test_an_indexed_blend_is_fingerprinted_by_its_idx_digest_and_its_bin_size(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.idx").write_bytes(b"MMIDIDX" + name.encode())
        (tmp_path / f"{name}.bin").write_bytes(b"\0" * 64)
    cfg = OmegaConf.create({"module": {"data": {"source": "indexed", "path": f"0.3 {tmp_path}/a 0.7 {tmp_path}/b",
                                                "tokenizer": None}}})
    entries = data_fingerprints(cfg)
    assert [entry["path"].rsplit("/", 1)[1] for entry in entries] == ["a.idx", "a.bin", "b.idx", "b.bin"]
    assert all(("sha256" in entry) == entry["path"].endswith(".idx") for entry in entries)
    assert entries[1]["bytes"] == 64


def test_a_frozen_copy_over_the_limits_is_refused_naming_the_file(tmp_path, monkeypatch):
    largest = max(frozen_code.code_files().items(), key=lambda item: item[1].stat().st_size)
    monkeypatch.setattr(frozen_code, "FILE_LIMIT_BYTES", largest[1].stat().st_size - 1)
    with pytest.raises(PrimusError, match=rf"launch.freeze_code=true: {largest[0]} \([\d.]+ MiB\) exceed the 0 MiB"):
        frozen_code.freeze_project_code(tmp_path)
    monkeypatch.setattr(frozen_code, "FILE_LIMIT_BYTES", 8 * 2**20)
    monkeypatch.setattr(frozen_code, "TOTAL_LIMIT_BYTES", 1000)
    with pytest.raises(PrimusError, match=r"src/ and conf/ hold [\d.]+ MiB, over the 0 MiB"):
        frozen_code.freeze_project_code(tmp_path)
    assert not list(tmp_path.iterdir())  # refused before anything is copied


def test_the_same_code_is_frozen_once_and_shared(tmp_path):
    first = frozen_code.freeze_project_code(tmp_path)
    again = frozen_code.freeze_project_code(tmp_path)
    assert (first.made, again.made, again.path) == (True, False, first.path)
    assert (first.path / "src" / "primus_hydra" / "launch" / "slurm" / "frozen_code.py").is_file()


def test_a_text_folder_is_fingerprinted_by_its_listing(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "b.md").write_text("two")
    cfg = OmegaConf.create({"module": {"data": {"source": "text", "path": str(tmp_path), "tokenizer": None}}})
    (entry,) = data_fingerprints(cfg)
    (tmp_path / "b.md").write_text("three")
    (changed,) = data_fingerprints(cfg)
    assert (entry["files"], entry["bytes"], entry["first_files"]) == (2, 6, ["a.txt", "b.md"])
    assert changed["listing_sha256"] != entry["listing_sha256"]
