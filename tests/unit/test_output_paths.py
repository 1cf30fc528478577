"""A folder a run would write into is checked before anything is created: one line naming what is wrong."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from primus_hydra.config.paths import hydra_job_dir, output_root_failure, run_dir_failures, writable_dir_failure
from primus_hydra.errors import PrimusError

FIX = "choose another"


def test_a_new_folder_under_a_writable_one_is_fine(tmp_path):
    assert writable_dir_failure("hydra.run.dir", tmp_path / "a" / "b", FIX) is None
    assert not (tmp_path / "a").exists()  # nothing created by checking


def test_an_empty_path_is_refused():
    assert writable_dir_failure("hydra.run.dir", "  ", FIX) == "hydra.run.dir is empty; choose another"


def test_a_file_is_not_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    assert writable_dir_failure("module.checkpoint.dir", tmp_path / "f", FIX) == (
        f"module.checkpoint.dir={tmp_path / 'f'}: exists and is not a folder; choose another")


def test_nothing_can_be_made_under_dev_null():
    line = writable_dir_failure("run dir", "/dev/null/runs/a", FIX)
    assert line == "run dir=/dev/null/runs/a: /dev/null is not a folder, so nothing can be created under it; choose another"


@pytest.mark.parametrize("root, kind", [("/proc", "proc"), ("/sys", "sysfs")])
def test_nothing_can_be_made_on_the_kernels_file_systems(root, kind):
    """root passes access() there, but mkdir fails: the mount's type says so first."""
    if not Path(root).is_dir():
        pytest.skip(f"{root} is not mounted here")
    line = writable_dir_failure("run dir", f"{root}/x/runs", FIX)
    assert line == f"run dir={root}/x/runs: {root} is on the kernel's {kind} file system, where no folder can be made; choose another"


def test_a_disk_folder_is_not_a_pseudo_file_system(tmp_path):
    assert writable_dir_failure("run dir", tmp_path / "runs", FIX) is None


def test_an_empty_output_root_would_write_at_the_filesystem_root():
    assert output_root_failure({"PRIMUS_OUTPUT_ROOT": ""}).startswith("PRIMUS_OUTPUT_ROOT is set but empty")
    assert output_root_failure({"PRIMUS_OUTPUT_ROOT": "runs"}) is None
    assert output_root_failure({}) is None


def test_run_dir_failures_name_the_keys_to_set(tmp_path):
    (tmp_path / "f").write_text("x")
    (line,) = run_dir_failures(tmp_path / "f" / "run")
    assert line.endswith("set hydra.run.dir (hydra.sweep.dir with -m) or PRIMUS_OUTPUT_ROOT to a writable folder")


@pytest.mark.parametrize("sweep", [False, True])
def test_an_empty_hydra_dir_is_refused_instead_of_running_in_the_current_folder(sweep):
    config = OmegaConf.create({"hydra": {"run": {"dir": ""}, "sweep": {"dir": "", "subdir": "0"}}})
    with pytest.raises(PrimusError, match=r"^hydra\.(run|sweep)\.dir is empty; give a folder"):
        hydra_job_dir(config, sweep=sweep)
