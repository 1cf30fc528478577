"""task=projection against hostile and unlucky input, as pure functions: every hardware number in its range (0, a
negative peak, a tiny peak, NaN), finite output, task.top, world sizes beyond any cluster, the device word on the
cpu entry, and a smallest-world hint that names a world where the search then finds a layout."""
from __future__ import annotations

import math

import pytest

from primus_hydra.config.schema_hardware import HARDWARE_RANGES, hardware_number_failures
from primus_hydra.errors import ConfigValidationError
from primus_hydra.projection.hardware import Hardware, hardware_entries, load_entry, resolve_hardware
from primus_hydra.projection.layout import LARGE_WORLD, MAX_WORLD, Layout, layout_from_config
from primus_hydra.projection.project import project, workload_of
from primus_hydra.projection.report import describe, search_table
from primus_hydra.projection.search import (
    Ranked,
    candidate_layouts,
    divisors,
    overrides_for,
    search,
    smallest_fitting_world,
)
from primus_hydra.tasks.projection import (
    ProjectionTask,
    non_finite_fields,
    projection_input_failures,
    rejected_by_validation,
    target_hardware,
)

POSITIVE_KEYS = [key for key, allowed in HARDWARE_RANGES.items() if allowed.low > 0]


def cpu_hardware() -> Hardware:
    return Hardware(name="cpu", vendor="cpu", memory_gib=16.0, peak_tflops=0.2, peak_source="test",
                    memory_bandwidth_gbps=8.0, intra_node_bandwidth_gbps=0.5, intra_node_latency_us=75.0,
                    inter_node_bandwidth_gbps=1.25, inter_node_latency_us=100.0, matmul_efficiency=0.7,
                    attention_efficiency=0.3, usable_memory_fraction=0.9)


# -- the hardware entry's numbers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [name for name in hardware_entries() if name != "auto"])
def test_every_shipped_hardware_entry_is_inside_the_ranges(name):
    assert hardware_number_failures(load_entry(name)) == []


def test_a_zero_bandwidth_is_one_line_with_the_key_the_value_and_the_range():
    assert hardware_number_failures({"memory_bandwidth_gbps": 0}) == [
        "hardware.memory_bandwidth_gbps=0: must be between 0.001 and 1000000 GB/s"]


def test_a_negative_peak_is_refused():
    assert hardware_number_failures({"peak_tflops_bf16": -5.0}) == [
        "hardware.peak_tflops_bf16=-5: must be between 0.001 and 1000000 TFLOP/s"]


def test_a_tiny_peak_that_would_overflow_the_step_time_is_refused():
    assert hardware_number_failures({"peak_tflops_fp32": 1e-320}) == [
        "hardware.peak_tflops_fp32=1e-320: must be between 0.001 and 1000000 TFLOP/s"]


@pytest.mark.parametrize("key", POSITIVE_KEYS)
def test_zero_is_refused_for_every_number_the_model_divides_by(key):
    (line,) = hardware_number_failures({key: 0.0})
    assert line.startswith(f"hardware.{key}=0: must be between ")


@pytest.mark.parametrize("key", list(HARDWARE_RANGES))
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, 1e300])
def test_negative_non_finite_and_huge_numbers_are_refused_for_every_key(key, value):
    (line,) = hardware_number_failures({key: value})
    assert line.startswith(f"hardware.{key}=") and ": must be between " in line


def test_null_numbers_pass_the_ranges_and_are_left_to_the_resolver():
    assert hardware_number_failures(load_entry("cpu")) == []
    assert load_entry("cpu").peak_tflops_bf16 is None


def test_an_efficiency_above_one_is_refused():
    assert hardware_number_failures({"matmul_efficiency": 1.5}) == [
        "hardware.matmul_efficiency=1.5: must be between 0.01 and 1 (a fraction)"]


def test_a_measured_cpu_peak_of_zero_is_refused_naming_where_it_came_from(monkeypatch):
    monkeypatch.setattr("primus_hydra.backends.cpu_peak_cache.cached_peak",
                        lambda threads, key: 3.0 if key == "op_dispatch_us" else 0.0)
    with pytest.raises(ConfigValidationError) as refused:
        resolve_hardware(load_entry("cpu"), precision="fp32", threads_per_rank=1, host_memory_gib=16.0, ranks_per_node=1)
    assert refused.value.failures == ["hardware=cpu: the peak (measured on this CPU at 1 thread(s) per rank)=0: must be "
                                      "between 0.001 and 1000000 TFLOP/s"]


def test_a_host_without_available_memory_is_refused_instead_of_fitting_nothing(monkeypatch):
    monkeypatch.setattr("primus_hydra.backends.cpu_peak_cache.cached_peak", lambda threads, key: 0.2)
    with pytest.raises(ConfigValidationError, match=r"hardware=cpu: the memory per rank .*=0: must be between 0.001"):
        resolve_hardware(load_entry("cpu"), precision="fp32", threads_per_rank=1, host_memory_gib=0.0, ranks_per_node=1)


# -- the job's own knobs, checked when it is prepared -------------------------------------------------------------

def test_task_top_below_one_is_refused(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "task.top=0")
    assert projection_input_failures(cfg, 1) == ["task.top=0: must be >= 1 (how many ranked layouts task.search prints)"]


def test_a_hardware_override_out_of_range_is_refused_when_the_job_is_prepared(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "hardware.inter_node_latency_us=-1")
    with pytest.raises(ConfigValidationError) as refused:
        ProjectionTask.prepare_job(cfg, None)
    assert refused.value.failures == ["hardware.inter_node_latency_us=-1: must be between 0 and 10000000 us"]


def test_a_tiny_platform_peak_is_refused_like_the_entry_peak(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "platform.peak_tflops_per_device=1e-320")
    assert projection_input_failures(cfg, 1) == [
        "platform.peak_tflops_per_device=1e-320: must be between 0.001 and 1000000 TFLOP/s"]


def test_a_world_beyond_the_largest_projected_is_refused(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "launch.nnodes=131073", "launch.nproc_per_node=8")
    assert MAX_WORLD == 1 << 20
    assert projection_input_failures(cfg, 131073 * 8) == [
        "launch.nnodes x launch.nproc_per_node = 131073 x 8 = 1,048,584 ranks: task=projection projects up to "
        "1,048,576 ranks (more than any cluster built)"]


def test_800000_gpus_project_with_a_warning(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "launch.nnodes=100000", "launch.nproc_per_node=8",
                         "module.global_batch_size=800000", "module.micro_batch_size=1")
    assert LARGE_WORLD < 800_000 <= MAX_WORLD
    job = ProjectionTask.prepare_job(cfg, None)
    assert ("launch.nnodes x launch.nproc_per_node = 100000 x 8 = 800,000 ranks: more than the largest clusters built "
            "(about 200,000 devices); the projection's network model was never checked at this scale (a mistyped "
            "launch.nnodes?)") in job.warnings


def test_a_world_below_the_warning_size_projects_without_it(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "launch.nnodes=1000", "launch.nproc_per_node=8",
                         "module.global_batch_size=8000", "module.micro_batch_size=1")
    assert not [warning for warning in ProjectionTask.prepare_job(cfg, None).warnings if "ranks:" in warning]


# -- the output stays valid JSON --------------------------------------------------------------------------------

def test_non_finite_numbers_are_found_anywhere_in_the_output():
    data = {"step_time_s": {"total": math.inf, "compute": 1.0}, "top": [{"mfu": 0.5}, {"mfu": math.nan}], "fits": True}
    assert non_finite_fields(data) == ["step_time_s.total=inf", "top.1.mfu=nan"]


def test_a_step_of_zero_seconds_is_an_infinite_throughput_not_a_zero_division(compose_config):
    cfg = compose_config("task=projection", "hardware=h100")
    layout = layout_from_config(cfg, 1, 1)
    hardware = resolve_hardware(cfg.hardware, precision="fp32", threads_per_rank=1, host_memory_gib=0, ranks_per_node=1)
    projection = project(cfg, layout, hardware)
    stopped = type(projection)(**{**projection.__dict__, "time": type(projection.time)(
        **{**projection.time.__dict__, "compute": 0.0, "optimizer": 0.0, "tp": 0.0, "cp": 0.0, "ep": 0.0, "dp": 0.0,
           "pp": 0.0, "bubble": 0.0})})
    assert stopped.tokens_per_s == math.inf and stopped.mfu == math.inf
    assert "tokens_per_s=inf" in non_finite_fields(stopped.to_dict())


# -- the report's words ---------------------------------------------------------------------------------------

def test_the_cpu_report_speaks_of_ranks_not_gpus(compose_config):
    cfg = compose_config("task=projection", "hardware=cpu")
    projection = project(cfg, layout_from_config(cfg, 1, 1), cpu_hardware())
    report = describe(projection, "llama_tiny") + search_table([Ranked(projection, overrides_for(projection.layout))])
    assert "GPU" not in report
    assert "on the most loaded rank" in report and "memory per rank" in report and "GiB/rank" in report


def test_a_gpu_report_still_speaks_of_gpus(compose_config):
    cfg = compose_config("task=projection", "hardware=h100")
    hardware = resolve_hardware(cfg.hardware, precision="fp32", threads_per_rank=1, host_memory_gib=0, ranks_per_node=1)
    assert "memory per GPU" in describe(project(cfg, layout_from_config(cfg, 1, 1), hardware), "llama_tiny")


# -- the search and its hint ------------------------------------------------------------------------------------

def test_divisors_of_a_huge_node_are_exact():
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36] and divisors(36, 10) == [1, 2, 3, 4, 6, 9]
    assert divisors(2 ** 40) == [2 ** k for k in range(41)]


def test_torch_candidates_are_only_layouts_its_adapter_runs(compose_config):
    cfg = compose_config("task=projection", "model=llama3_8b", "hardware=h100", "launch.nnodes=2",
                         "launch.nproc_per_node=8", "module.seq_length=32768", "module.global_batch_size=64")
    layouts = list(candidate_layouts(workload_of(cfg), layout_from_config(cfg, 16, 8), 16))
    assert layouts and all(layout.cp == 1 and layout.ep == 1 for layout in layouts)
    assert all(layout.tp == 1 and layout.dp == 1 for layout in layouts if layout.pp > 1)


def _torch_70b(compose_config, nnodes: int, batch: int = 64, seq: int = 2048):
    return compose_config("task=projection", "task.search=true", "model=llama3_70b", "hardware=h100",
                          f"launch.nnodes={nnodes}", "launch.nproc_per_node=8", f"module.global_batch_size={batch}",
                          f"module.seq_length={seq}", "module.micro_batch_size=1")


def _search_at(cfg, world: int):
    layout = layout_from_config(cfg, world, 8)
    hardware = target_hardware(cfg, layout)
    return search(cfg, layout, hardware, top=1,
                  rejects=lambda overrides: rejected_by_validation(cfg, overrides, world, True))


def _hint(cfg, world: int):
    layout = Layout(backend="torch", world=world, nproc_per_node=8, tp=1, pp=1, cp=1, ep=1, dp=world, micro_batch=1,
                    grad_accum=1, precision=str(cfg.module.precision))
    hardware = target_hardware(cfg, layout)
    return smallest_fitting_world(cfg, layout, hardware, lambda overrides, at: rejected_by_validation(
        cfg, [*overrides, f"launch.nnodes={at // 8}"], at, True))


def test_the_torch_hint_names_a_world_where_the_search_then_finds_a_layout(compose_config):
    assert _search_at(_torch_70b(compose_config, 1), 8)[0] == []  # 70B on one node of h100: nothing fits
    hinted = _hint(_torch_70b(compose_config, 1), 8)
    assert hinted == 64
    ranked, _, _ = _search_at(_torch_70b(compose_config, hinted // 8), hinted)  # the search again, at the hint
    assert len(ranked) == 1 and ranked[0].projection.fits and ranked[0].projection.layout.world == 64


def test_the_torch_hint_is_none_where_no_world_fits_and_splits_the_batch(compose_config):
    # the old hint named 1024 here, then 2048 at 1024, and so on: at 1024 the search finds nothing
    assert _hint(_torch_70b(compose_config, 1, batch=256, seq=4096), 8) is None
    assert _search_at(_torch_70b(compose_config, 128, batch=256, seq=4096), 1024)[0] == []


def test_the_hint_skips_world_sizes_at_which_a_run_refuses_every_layout(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "launch.nproc_per_node=8", "module.global_batch_size=64")
    layout = layout_from_config(cfg, 8, 8)
    hardware = target_hardware(cfg, layout)
    asked = []

    def refuses_below_32(overrides, world):
        asked.append(world)
        return ["too small"] if world < 32 else []

    assert smallest_fitting_world(cfg, layout, hardware, lambda overrides, world: []) == 16
    assert smallest_fitting_world(cfg, layout, hardware, refuses_below_32) == 32
    assert sorted(set(asked)) == [16, 32]
