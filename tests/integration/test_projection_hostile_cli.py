"""task=projection on the command line against hostile and unlucky input: a bad hardware number or task knob is one
`error:` line, exit 2, no traceback, no torch, nothing written and nothing on stdout; a sweep point whose search
finds no layout is that point's result while the others run; the smallest-world hint holds when it is followed;
the cpu report never says GPU; 800,000 GPUs project with a warning."""
from __future__ import annotations

import json
import re

import pytest
from test_bad_input import assert_refused, run_cli

from helpers.cli import error_lines

PROJECTION = ["task=projection", "hardware=h100"]
# the cpu entry with its measured numbers given: no child process measures this machine
CPU_GIVEN = ["task=projection", "hardware=cpu", "platform.peak_tflops_per_device=0.2", "hardware.op_overhead_us=20",
             "hardware.dtensor_op_overhead_us=200"]

ROWS = [  # (id, arguments, the one error line)
    ("bandwidth_zero", ["hardware.memory_bandwidth_gbps=0"],
     "hardware.memory_bandwidth_gbps=0: must be between 0.001 and 1000000 GB/s"),
    ("latency_negative", ["hardware.inter_node_latency_us=-1"],
     "hardware.inter_node_latency_us=-1: must be between 0 and 10000000 us"),
    ("peak_negative", ["module.precision=bf16", "hardware.peak_tflops_bf16=-5"],
     "hardware.peak_tflops_bf16=-5: must be between 0.001 and 1000000 TFLOP/s"),
    ("peak_tiny", ["hardware.peak_tflops_fp32=1e-320"],
     "hardware.peak_tflops_fp32=1e-320: must be between 0.001 and 1000000 TFLOP/s"),
    ("peak_huge", ["hardware.peak_tflops_fp32=1e300"],
     "hardware.peak_tflops_fp32=1e+300: must be between 0.001 and 1000000 TFLOP/s"),
    ("platform_peak_tiny", ["platform.peak_tflops_per_device=1e-320"],
     "platform.peak_tflops_per_device=1e-320: must be between 0.001 and 1000000 TFLOP/s"),
    ("memory_zero", ["hardware.memory_gib=0"], "hardware.memory_gib=0: must be between 0.001 and 1000000 GiB"),
    ("efficiency_zero", ["hardware.matmul_efficiency=0"],
     "hardware.matmul_efficiency=0: must be between 0.01 and 1 (a fraction)"),
    ("memory_fraction_nan", ["hardware.usable_memory_fraction=nan"],
     "hardware.usable_memory_fraction=nan: must be between 0.01 and 1 (a fraction)"),
    ("top_zero", ["task.search=true", "task.top=0"], "task.top=0: must be >= 1 (how many ranked layouts task.search prints)"),
    ("world_beyond_any_cluster", ["launch.nnodes=200000", "launch.nproc_per_node=8"],
     "launch.nnodes x launch.nproc_per_node = 200000 x 8 = 1,600,000 ranks: task=projection projects up to 1,048,576"),
    ("auto_entry_override", ["hardware=auto", "hardware.intra_node_bandwidth_gbps=-2"],
     "hardware.intra_node_bandwidth_gbps=-2: must be between 0.001 and 1000000 GB/s"),
]


@pytest.mark.parametrize("args, expected", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_a_bad_projection_input_is_one_line_exit_2_nothing_on_stdout_nothing_written(tmp_path, args, expected):
    result = run_cli(tmp_path, [*PROJECTION, *args], {})
    assert_refused(result, expected, tmp_path / "out")
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_a_multirun_search_reports_a_point_that_fits_nowhere_and_runs_the_others(tmp_path):
    result = run_cli(tmp_path, ["-m", "task=projection", "task.search=true", "hardware=h100", "launch.nproc_per_node=8",
                                "module.global_batch_size=64", "module.seq_length=2048",
                                "model=llama3_8b,llama3.1_405b,llama3.2_1b"], {"TMPDIR": str(tmp_path)})
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]  # every line parses: no Infinity, no NaN
    assert [line["point"]["num"] for line in lines] == [0, 1, 2]
    assert "search" in lines[0] and "search" in lines[2]
    assert lines[1]["error"].startswith("model llama3.1_405b fits no layout of 8 x h100")
    assert error_lines(result.stderr) == [
        f"error: [job 1: model=llama3.1_405b] {lines[1]['error']}",
        f"error: 1 of 3 sweep point(s) failed, the others completed: [job 1: model=llama3.1_405b] {lines[1]['error']}"]
    assert "Traceback" not in result.stderr and "TORCH_IMPORTED=False" in result.stderr


def test_the_torch_hint_names_a_world_size_where_the_search_then_finds_a_layout(tmp_path):
    base = ["task=projection", "task.search=true", "model=llama3_70b", "hardware=h100", "launch.nproc_per_node=8",
            "module.global_batch_size=64", "module.seq_length=2048"]
    refused = run_cli(tmp_path, [*base, "launch.nnodes=2"], {})
    (line,) = error_lines(refused.stderr)
    assert refused.returncode == 2 and "model llama3_70b fits no layout of 16 x h100" in line
    nodes = int(re.search(r"the smallest world size where a layout fits is \d+ \(\d+ nodes of 8\): "
                          r"launch\.nnodes=(\d+)$", line).group(1))
    followed = run_cli(tmp_path, [*base, f"launch.nnodes={nodes}"], {})
    assert followed.returncode == 0, followed.stderr[-3000:]
    search = json.loads(followed.stdout)["search"]
    assert search["top"] and all(entry["fits"] and entry["layout"]["world_size"] == nodes * 8 for entry in search["top"])


def test_the_cpu_report_never_says_gpu(tmp_path):
    result = run_cli(tmp_path, [*CPU_GIVEN, "task.search=true"], {})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GPU" not in result.stderr
    assert "memory per rank" in result.stderr and "GiB/rank" in result.stderr
    json.loads(result.stdout)


def test_800000_gpus_project_with_a_warning_naming_the_world_size(tmp_path):
    result = run_cli(tmp_path, [*PROJECTION, "launch.nnodes=100000", "launch.nproc_per_node=8",
                                "module.global_batch_size=800000", "module.micro_batch_size=1"], {})
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("warning: launch.nnodes x launch.nproc_per_node = 100000 x 8 = 800,000 ranks: more than the largest "
            "clusters built") in result.stderr
    assert json.loads(result.stdout)["layout"]["world_size"] == 800_000
