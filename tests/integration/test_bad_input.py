"""Bad input, as a user types it: one `error:` line naming the key or variable, exit code 2, torch never imported,
and nothing written (no run dir, no sweep dir). One row per class of mistake."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import REPORTING_TORCH, clean_env, error_lines
from helpers.read_only import read_only_folder

# the CLI as `python -m primus_hydra`, reporting at exit whether torch was imported
MEGATRON = ["backend=megatron", "module.data.source=mock", "task.dry_run=true"]

ROWS = [  # (id, arguments, extra environment, the start of the one error line)
    ("batch_beyond_ram", ["module.micro_batch_size=200000", "module.global_batch_size=200000"], {},
     "the job does not fit in host memory: about "),
    ("thousand_processes", ["launch.nproc_per_node=1000", "module.micro_batch_size=1", "module.global_batch_size=1000"],
     {}, "the job does not fit in host memory: about "),
    ("lr_nan", ["module.lr=nan"], {}, "module.lr=nan: must be a finite number"),
    ("clip_nan", ["module.clip_grad=nan"], {}, "module.clip_grad=nan: must be a finite number"),
    ("exit_interval_negative", ["module.exit_interval=-1"], {}, "module.exit_interval=-1: must be >= 0"),
    ("seed_negative", ["module.seed=-1"], {}, "module.seed=-1: must be in [0, 2^63)"),
    ("extra_arg_owned", [*MEGATRON, "+backend.extra_args.micro_batch_size=0"], {},
     "backend.extra_args.micro_batch_size=0: backend=megatron sets micro_batch_size from module.micro_batch_size"),
    ("interpolation", ["module.lr=${oc.decode:abc}"], {},
     "module.lr: While dereferencing interpolation '${oc.decode:abc}': Value 'abc' of type 'str' could not be "
     "converted to Float"),
    ("world_size_abc", [], {"RANK": "0", "WORLD_SIZE": "abc"}, "WORLD_SIZE=abc: must be an integer >= 1"),
    ("rank_beyond_world", [], {"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3 must be below WORLD_SIZE=2"),
    ("rank_negative", [], {"RANK": "-1", "WORLD_SIZE": "2"}, "RANK=-1: must be >= 0"),
    ("omp_abc", [], {"OMP_NUM_THREADS": "abc"}, "OMP_NUM_THREADS=abc: must be an integer >= 1"),
    ("patches_blank", [], {"PRIMUS_PATCHES": " "}, "PRIMUS_PATCHES=' ' names no patch"),
    ("patches_comma", [], {"PRIMUS_PATCHES": ","}, "PRIMUS_PATCHES=',' names no patch"),
    ("master_addr", ["launch.nproc_per_node=2", "module.global_batch_size=16", "launch.master_addr=no-such.invalid"],
     {}, "launch.master_addr=no-such.invalid does not resolve on this machine"),
    ("start_method", ["-m", "hydra/launcher=primus_local", "hydra.launcher.start_method=bogus", "module.lr=1e-3"], {},
     "hydra.launcher.start_method: Invalid value 'bogus', expected one of [forkserver, spawn]"),
    ("max_batch_size", ["-m", "hydra.sweeper.max_batch_size=0", "module.lr=1e-3,2e-3"], {},
     "hydra.sweeper.max_batch_size=0: must be >= 1"),
    ("key_swept_twice", ["-m", "module.lr=1e-3,2e-3", "module.lr=3e-3"], {}, "module.lr is given 2 times"),
    ("empty_range", ["-m", "module.log.interval=range(5,1)"], {}, "module.log.interval=range(5,1): sweeps over no values"),
    ("second_point_bad", ["-m", "module.warmup_iters=0,-1"], {},
     "[job 1: module.warmup_iters=-1] module.warmup_iters=-1: must be >= 0"),
    ("output_root_empty", [], {"PRIMUS_OUTPUT_ROOT": ""}, "PRIMUS_OUTPUT_ROOT is set but empty"),
    ("output_root_under_file", [], {"PRIMUS_OUTPUT_ROOT": "/dev/null/runs"}, "run dir=/dev/null/runs/"),
    ("checkpoint_dir_under_file", ["module.checkpoint.dir=/dev/null/ckpt"], {}, "module.checkpoint.dir=/dev/null/ckpt"),
]


def run_cli(tmp_path: Path, args: list[str], env: dict, output_root: Path | None = None) -> subprocess.CompletedProcess:
    environment = clean_env({"PRIMUS_OUTPUT_ROOT": str(output_root or tmp_path / "out"), **env})
    return subprocess.run([sys.executable, "-c", REPORTING_TORCH, *args, "module.train_iters=2"], capture_output=True,
                          text=True, env=environment, cwd=tmp_path, timeout=120)


def assert_refused(result: subprocess.CompletedProcess, expected: str, output_root: Path) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(error_lines(result.stderr)) == 1, result.stderr[-3000:]
    assert error_lines(result.stderr)[0].startswith(f"error: {expected}"), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "$VALUE" not in result.stderr and "$FULL_KEY" not in result.stderr
    assert "TORCH_IMPORTED=False" in result.stderr
    assert not output_root.exists() or not any(output_root.iterdir())  # no run dir, no sweep dir


@pytest.mark.parametrize("args, env, expected", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_input_is_one_line_exit_2_no_torch_nothing_written(tmp_path, args, env, expected):
    assert_refused(run_cli(tmp_path, args, env), expected, tmp_path / "out")


CONFIG_FILES = [  # (id, group/file, content, the start of the one error line after the file's path)
    ("tab", "model/tabs.yaml", b"name: m\n\tnum_layers: 2\n",
     ":2:1: not valid YAML: a tab character (YAML indents with spaces only)"),
    ("duplicate_key", "model/dup.yaml", b"name: m\nname: n\n", ":2:1: not valid YAML: found duplicate key name"),
    ("not_utf8", "model/bin.yaml", b"name: \xff\xfe\n", ":1:7: not UTF-8 text (byte 0xff)"),
    ("unclosed", "model/bad.yaml", b"name: [unclosed\n", ":2:1: not valid YAML: expected ',' or ']'"),
]


@pytest.mark.parametrize("relative, content, expected", [row[1:] for row in CONFIG_FILES],
                         ids=[row[0] for row in CONFIG_FILES])
def test_a_broken_config_file_is_named_with_line_and_column(tmp_path, relative, content, expected):
    path = tmp_path / "conf" / relative
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    result = run_cli(tmp_path, ["--config-dir", str(tmp_path / "conf"), f"model={path.stem}"], {})
    assert_refused(result, f"{path}{expected}", tmp_path / "out")


def test_an_experiment_without_its_package_line_says_so(tmp_path):
    path = tmp_path / "conf" / "experiment" / "mine.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("module:\n  lr: 1.0e-3\n")
    result = run_cli(tmp_path, ["--config-dir", str(tmp_path / "conf"), "experiment=mine"], {})
    assert_refused(result, "the selected experiment file does not start with the line `# @package _global_`",
                   tmp_path / "out")


def test_a_read_only_output_root_is_refused_naming_it(tmp_path):
    with read_only_folder(tmp_path / "ro") as folder:
        result = run_cli(tmp_path, [], {}, output_root=folder / "runs")
    assert_refused(result, f"run dir={folder / 'runs'}/", folder)
    assert f"{folder} is not writable (" in result.stderr
