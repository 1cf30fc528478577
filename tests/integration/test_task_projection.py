"""task=projection on the command line: JSON on stdout, a report on stderr, no torch, nothing written; -m prints a
line per point; the search proposes only layouts a run accepts; bad input is one line and exit 2."""
from __future__ import annotations

import json

import pytest
from test_task_plan import primus_plan

from helpers.compose import compose_primus

LLAMA_70B_ON_4_MI300X_NODES = ["task=projection", "backend=megatron", "model=llama3_70b", "launch.nnodes=4",
                               "launch.nproc_per_node=8", "module.parallel.tp=8", "module.parallel.pp=2",
                               "hardware=mi300x", "module.precision=bf16", "module.seq_length=8192",
                               "module.global_batch_size=128", "module.micro_batch_size=1"]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_projection_prints_json_and_a_report_and_writes_nothing(tmp_path):
    result = primus_plan(tmp_path, *LLAMA_70B_ON_4_MI300X_NODES)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout)
    assert data["parameters"] == 70_553_706_496
    assert set(data["memory_gib"]) == {"weights", "gradients", "optimizer", "activations", "overhead", "total"}
    assert set(data["step_time_s"]["communication"]) == {"tp", "cp", "ep", "dp", "pp", "total"}
    assert {"fits", "flops_per_step", "tokens_per_s", "mfu", "parameters_per_gpu", "usable_memory_gib"} <= set(data)
    assert data["layout"] == {**data["layout"], "tp": 8, "pp": 2, "dp": 2, "grad_accum": 64, "distributed_optimizer": True}
    memory = data["memory_gib"]
    assert memory["total"] == pytest.approx(sum(v for k, v in memory.items() if k != "total"), abs=1e-3)
    assert data["fits"] and 0 < data["mfu"] < 1
    assert "memory per GPU" in result.stderr and "TORCH_IMPORTED=False" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_multirun_over_layouts_prints_one_json_line_per_point(tmp_path):
    result = primus_plan(tmp_path, "-m", "task=projection", "model=llama3_8b", "hardware=h100",
                         "launch.nproc_per_node=8", "module.global_batch_size=64", "module.seq_length=2048",
                         "module.parallel.tp=1,2,4,8", "module.micro_batch_size=1,2,4")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 12
    points = {(line["layout"]["tp"], line["layout"]["micro_batch_size"]) for line in lines}
    assert points == {(tp, mb) for tp in (1, 2, 4, 8) for mb in (1, 2, 4)}
    assert all("module.parallel.tp=" in " ".join(line["point"]["overrides"]) for line in lines)
    assert "TORCH_IMPORTED=False" in result.stderr


def test_search_ranks_layouts_that_a_run_accepts(tmp_path):
    base = ["backend=megatron", "model=llama3_8b", "launch.nnodes=2", "launch.nproc_per_node=8", "hardware=h100",
            "module.precision=bf16", "module.global_batch_size=128", "module.seq_length=4096"]
    result = primus_plan(tmp_path, "task=projection", "task.search=true", *base)
    assert result.returncode == 0, result.stderr[-2000:]
    search = json.loads(result.stdout)["search"]
    assert len(search["top"]) == 10 and search["fitting"] >= 10
    speeds = [entry["tokens_per_s"] for entry in search["top"]]
    assert speeds == sorted(speeds, reverse=True) and all(entry["fits"] for entry in search["top"])
    trains = [override for override in base if not override.startswith("hardware=")]
    assert "best: python -m primus_hydra task=train " + " ".join(trains + search["best_overrides"]) in result.stderr
    from primus_hydra.orchestrator.prepare import prepare

    for entry in search["top"]:  # composed again from the printed overrides: a run takes every one of them
        cfg = compose_primus("task=train", *base, *entry["overrides"])
        job = prepare(cfg, world_size=16, on_this_machine=False, trains=False, runs_on_gpu=True)
        assert job.layout.tp == entry["layout"]["tp"] and job.layout.pp == entry["layout"]["pp"]


def test_search_for_deepseek_v3_on_32_h200_nodes(tmp_path):
    result = primus_plan(tmp_path, "task=projection", "model=deepseek_v3", "backend=megatron", "launch.nnodes=32",
                         "launch.nproc_per_node=8", "hardware=h200", "task.search=true", "module.precision=bf16",
                         "module.seq_length=4096", "module.global_batch_size=1024")
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout)
    assert data["configured"] is None  # the default layout (dp 256 x micro batch 8) cannot split 1024 sequences
    top = data["search"]["top"]
    assert all(entry["fits"] for entry in top) and any(entry["layout"]["ep"] > 1 for entry in top)
    # 61 layers split over a pipeline only unevenly: such layouts come with a lighter first stage
    piped = [entry["layout"] for entry in top if entry["layout"]["pp"] > 1]
    assert piped and all(0 < layout["first_stage_layers"] < 61 / layout["pp"] for layout in piped)
    assert all((61 - layout["first_stage_layers"]) % (layout["pp"] - 1) == 0 for layout in piped)


def test_an_unknown_hardware_entry_is_one_line(tmp_path):
    result = primus_plan(tmp_path, "task=projection", "hardware=tpu9")
    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1 and "hardware" in error_lines(result.stderr)[0]
    assert "mi300x" in error_lines(result.stderr)[0]


def test_an_impossible_layout_gets_the_message_a_run_gets(tmp_path):
    layout = ["model=llama3_8b", "launch.nproc_per_node=8", "module.parallel.tp=3"]
    projection = primus_plan(tmp_path, "task=projection", "hardware=h100", *layout)
    train = primus_plan(tmp_path, "task=train", "task.dry_run=true", *layout)
    assert projection.returncode == train.returncode == 2
    assert error_lines(projection.stderr) == error_lines(train.stderr)
    assert any("module.parallel.tp=3 does not divide model.num_attention_heads=32" in line
               for line in error_lines(projection.stderr))


def test_a_model_that_fits_no_layout_names_the_smallest_world_that_does(tmp_path):
    result = primus_plan(tmp_path, "task=projection", "model=llama3.1_405b", "backend=megatron", "hardware=h100",
                         "launch.nproc_per_node=8", "task.search=true", "module.precision=bf16",
                         "module.global_batch_size=64", "module.seq_length=4096")
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = error_lines(result.stderr)
    assert "fits no layout of 8 x h100" in line and "the smallest world size where a layout fits is" in line
