"""util/installed.py: the version importlib.metadata gives, read without importing it."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from primus_hydra.util.installed import installed_version, installed_versions


@pytest.mark.parametrize("distribution", ["torch", "hydra-core", "hydra_core", "OmegaConf", "megatron-core",
                                          "torchtitan", "megatron.bridge", "PyYAML", "primus-hydra"])
def test_each_installed_distribution_reads_as_importlib_metadata_reads_it(distribution):
    assert installed_version(distribution) == importlib.metadata.version(distribution)


def test_several_read_at_once_read_as_each_alone():
    names = ["torch", "hydra-core", "hydra_core", "no-such-distribution-here", "PyYAML", "omegaconf"]
    assert installed_versions(names) == {name: installed_version(name) for name in names}


def test_a_distribution_that_is_not_installed_is_none():
    assert installed_version("no-such-distribution-here") is None


def test_the_first_sys_path_entry_that_holds_it_decides(tmp_path, monkeypatch):
    for folder, version in (("first", "1.0"), ("second", "2.0")):
        info = tmp_path / folder / f"some_dist-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: some-dist\nVersion: {version}\n\nbody\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(tmp_path / "second"), str(tmp_path / "first")])
    assert installed_version("Some.Dist") == "2.0" == importlib.metadata.version("Some.Dist")


def _install(folder, version: str) -> None:
    info = folder / f"late_dist-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: late-dist\nVersion: {version}\n\nbody\n")


def test_a_distribution_installed_or_upgraded_since_the_last_read_is_read_anew(tmp_path, monkeypatch):
    import os
    import shutil

    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert installed_version("late-dist") is None
    _install(tmp_path, "1.0")
    os.utime(tmp_path, ns=(1, 1))  # whatever the clock's resolution: the folder changed
    assert installed_version("late-dist") == "1.0"
    shutil.rmtree(tmp_path / "late_dist-1.0.dist-info")
    _install(tmp_path, "1.1")
    os.utime(tmp_path, ns=(2, 2))
    assert installed_version("late-dist") == "1.1" == importlib.metadata.version("late-dist")


def test_an_egg_info_is_left_to_importlib_metadata(tmp_path, monkeypatch):
    info = tmp_path / "egg_dist.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: egg-dist\nVersion: 3.1\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert installed_version("egg-dist") == "3.1" == importlib.metadata.version("egg-dist")


def test_reading_a_version_imports_no_importlib_metadata():
    code = ("import sys\nfrom primus_hydra.util.installed import installed_version\n"
            "print(installed_version('torch'), 'importlib.metadata' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [importlib.metadata.version("torch"), "False"]
