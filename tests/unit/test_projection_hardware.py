"""The hardware/ group: every entry composes with its numbers, `auto` follows the GPU the vendor tool names."""
from __future__ import annotations

import pytest
from test_resources import fake_tool

from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.gpu_probe import detect_gpu_model
from primus_hydra.projection.hardware import (
    REQUIRED,
    entry_for_gpu_model,
    hardware_entries,
    load_entry,
    resolve_hardware,
)

GPU_ENTRIES = ["b200", "h100", "h200", "mi300x", "mi325x", "mi355x"]


def test_the_group_has_the_entries_the_issue_names():
    assert set(hardware_entries()) == {"auto", "cpu", *GPU_ENTRIES}


@pytest.mark.parametrize("name", GPU_ENTRIES)
def test_gpu_entries_give_every_number(compose_config, name):
    entry = compose_config(f"hardware={name}").hardware
    assert entry.name == name and entry.vendor in ("amd", "nvidia")
    assert all(entry[key] is not None and entry[key] > 0 for key in (*REQUIRED, "memory_gib", "peak_tflops_bf16", "peak_tflops_fp8"))
    hardware = resolve_hardware(entry, precision="bf16", threads_per_rank=1, host_memory_gib=0, ranks_per_node=8)
    assert hardware.peak_tflops == entry.peak_tflops_bf16 and hardware.peak_source == "hardware.peak_tflops_bf16"
    assert hardware.usable_memory_gib == pytest.approx(entry.memory_gib * entry.usable_memory_fraction)


def test_a_wrong_type_in_a_hardware_key_fails_at_composition(compose_config):
    with pytest.raises(Exception, match="memory_gib"):
        compose_config("hardware=h100", "hardware.memory_gib=lots")


def test_platform_peak_replaces_the_entry_peak():
    hardware = resolve_hardware(load_entry("h100"), precision="bf16", threads_per_rank=1, host_memory_gib=0,
                                ranks_per_node=8, platform_peak=700.0)
    assert (hardware.peak_tflops, hardware.peak_source) == (700.0, "platform.peak_tflops_per_device")


def test_the_cpu_entry_reads_the_cached_peak_and_shares_host_memory(monkeypatch):
    monkeypatch.setattr("primus_hydra.backends.cpu_peak_cache.cached_peak",
                        lambda threads, key: 3.0 if key == "op_dispatch_us" else 0.1 * threads)
    hardware = resolve_hardware(load_entry("cpu"), precision="fp32", threads_per_rank=2, host_memory_gib=20.0,
                                ranks_per_node=4)
    assert hardware.peak_tflops == pytest.approx(0.2) and hardware.memory_gib == 5.0
    assert hardware.memory_bandwidth_gbps == 2 * load_entry("cpu").memory_bandwidth_gbps  # per thread of the rank
    entry = load_entry("cpu")
    assert hardware.op_overhead_us == 3.0 * entry.op_dispatches  # counted ops in units of the measured dispatch
    assert hardware.dtensor_op_overhead_us == 3.0 * entry.dtensor_op_dispatches


@pytest.mark.parametrize("reported, entry", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI325X OAM", "mi325x"), ("AMD Instinct MI355X", "mi355x"),
    (None, "cpu"),
])
def test_auto_picks_the_entry_of_the_reported_gpu(reported, entry):
    assert entry_for_gpu_model(reported) == entry


def test_auto_on_an_unknown_gpu_is_one_line():
    with pytest.raises(ConfigValidationError, match="hardware=auto: the detected GPU 'NVIDIA A100-SXM4-80GB' has no "
                                                   "hardware/ entry"):
        entry_for_gpu_model("NVIDIA A100-SXM4-80GB")


def test_the_gpu_model_comes_from_the_vendor_tools(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "nvidia-smi", "NVIDIA H100 80GB HBM3\nNVIDIA H100 80GB HBM3")
    assert detect_gpu_model({"PATH": str(bin_dir)}) == "NVIDIA H100 80GB HBM3"
    amd = tmp_path / "amd"
    fake_tool(amd, "amd-smi", '[{"gpu": 0, "asic": {"market_name": "AMD Instinct MI300X"}}]')
    assert detect_gpu_model({"PATH": str(amd)}) == "AMD Instinct MI300X"
    rocm = tmp_path / "rocm"
    fake_tool(rocm, "rocm-smi", '{"card0": {"Card Series": "AMD Instinct MI325X"}}')
    assert detect_gpu_model({"PATH": str(rocm)}) == "AMD Instinct MI325X"
    assert detect_gpu_model({"PATH": str(tmp_path / "none")}) is None
    assert detect_gpu_model({"PATH": "", "PRIMUS_AUTO_GPU_MODEL": "NVIDIA B200"}) == "NVIDIA B200"
