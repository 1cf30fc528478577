"""Resource detection on faked machines: fake nvidia-smi/amd-smi/rocm-smi on PATH, fake cgroup and /proc files."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.resources import detect_resources

GIB = 1024 ** 3


def fake_tool(folder: Path, name: str, stdout: str, *, sleep: float = 0.0, exit_code: int = 0) -> None:
    folder.mkdir(exist_ok=True)
    script = folder / name
    # absolute paths: the tests give the tool a PATH holding the fake tools only
    pause = f"{shutil.which('sleep')} {sleep}" if sleep else ""
    script.write_text(f"#!/bin/sh\n{pause}\n{shutil.which('cat')} <<'EOF'\n{stdout}\nEOF\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def machine(tmp_path: Path, tools: dict[str, str] | None = None, env: dict[str, str] | None = None,
            meminfo_kib: int = 32 * 1024 * 1024, cgroup: dict[str, str] | None = None, self_cgroup: str = "0::/\n"):
    """detect_resources on a fake machine; only the tools given are on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, out in (tools or {}).items():
        fake_tool(bin_dir, name, out)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text(f"MemTotal: {2 * meminfo_kib} kB\nMemAvailable: {meminfo_kib} kB\n")
    (proc / "self" / "cgroup").write_text(self_cgroup)
    root = tmp_path / "cgroup"
    root.mkdir(exist_ok=True)
    for relative, text in (cgroup or {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    environ = {"PATH": str(bin_dir), **(env or {})}
    return detect_resources(environ, cgroup_root=root, proc_root=proc)


NVIDIA_4 = "0, GPU-aaa, 81000\n1, GPU-bbb, 40960\n2, GPU-ccc, 1024\n3, GPU-ddd, 81920"


def test_nvidia_smi_lists_gpus_with_free_memory_in_gib(tmp_path):
    r = machine(tmp_path, {"nvidia-smi": NVIDIA_4})
    assert [(g.index, g.vendor, round(g.free_gib, 3)) for g in r.gpus] == [
        (0, "nvidia", 79.102), (1, "nvidia", 40.0), (2, "nvidia", 1.0), (3, "nvidia", 80.0)]
    assert r.sources["gpus"] == "nvidia-smi" and r.mask_variable == "CUDA_VISIBLE_DEVICES"


def test_cuda_visible_devices_selects_physical_gpus_in_mask_order_by_index_or_uuid(tmp_path):
    r = machine(tmp_path, {"nvidia-smi": NVIDIA_4}, {"CUDA_VISIBLE_DEVICES": "3,GPU-bbb"})
    assert [(g.index, g.free_gib) for g in r.gpus] == [(3, 80.0), (1, 40.0)]
    assert r.absent_mask_entries == () and r.mask_error is None


@pytest.mark.parametrize("mask", ["", "-1", "none", "NoDevFiles"])
def test_an_empty_or_no_device_mask_means_no_gpus(tmp_path, mask):
    assert machine(tmp_path, {"nvidia-smi": NVIDIA_4}, {"CUDA_VISIBLE_DEVICES": mask}).gpus == ()


def test_a_mask_naming_absent_devices_is_reported_as_one_line(tmp_path):
    r = machine(tmp_path, {"nvidia-smi": NVIDIA_4}, {"CUDA_VISIBLE_DEVICES": "1,7"})
    assert [g.index for g in r.gpus] == [1] and r.absent_mask_entries == ("7",)
    assert r.mask_error == "CUDA_VISIBLE_DEVICES=1,7 names device(s) 7 that this machine does not have; nvidia-smi lists 4 GPU(s): 0, 1, 2, 3"


def test_without_any_tool_the_mask_alone_counts_gpus_with_unknown_memory(tmp_path):
    r = machine(tmp_path, {}, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert [(g.index, g.free_gib) for g in r.gpus] == [(2, None), (3, None)] and r.mask_error is None


def test_no_tool_and_no_mask_means_no_gpus(tmp_path):
    r = machine(tmp_path, {})
    assert r.gpus == () and r.sources["gpus"] == "none found"


def test_a_failing_or_garbled_tool_means_unknown_not_a_crash(tmp_path):
    fake_tool(tmp_path / "bin", "nvidia-smi", "NVIDIA-SMI has failed", exit_code=9)
    fake_tool(tmp_path / "bin", "rocm-smi", "not json")
    assert machine(tmp_path, {}).gpus == ()


def test_a_hanging_tool_times_out(tmp_path, monkeypatch):
    from primus_hydra.orchestrator import gpu_probe

    monkeypatch.setattr(gpu_probe, "PROBE_TIMEOUT_S", 0.5)
    fake_tool(tmp_path / "bin", "nvidia-smi", NVIDIA_4, sleep=30)
    assert machine(tmp_path, {}).gpus == ()


def test_a_tool_is_found_where_shutil_which_finds_it(tmp_path, monkeypatch):
    import shutil

    from primus_hydra.orchestrator.gpu_probe import _on_path

    runnable, plain, folder = tmp_path / "runnable", tmp_path / "plain", tmp_path / "folder"
    for made in (runnable, plain, folder):
        made.mkdir()
    (runnable / "tool").write_text("#!/bin/sh\n")
    (runnable / "tool").chmod(0o755)
    (plain / "tool").write_text("not runnable")
    (folder / "tool").mkdir()
    monkeypatch.chdir(runnable)  # an empty PATH entry is the working directory
    for search_path in (str(runnable), str(plain), str(folder), f"{plain}{os.pathsep}{runnable}", "",
                        f"{folder}{os.pathsep}", str(tmp_path / "missing"), None):
        for command in ("tool", "no-such-tool", "./tool", str(runnable / "tool"), str(plain / "tool"), "folder/tool"):
            assert _on_path(command, search_path) == (shutil.which(command, path=search_path) is not None), \
                (command, search_path)


AMD_SMI = json.dumps([
    {"gpu": 0, "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "free_vram": {"value": 196592, "unit": "MB"}}},
    {"gpu": 1, "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "free_vram": {"value": 98296, "unit": "MB"}}},
])
ROCM_SMI = json.dumps({
    "card0": {"VRAM Total Memory (B)": str(192 * GIB), "VRAM Total Used Memory (B)": str(2 * GIB)},
    "card1": {"VRAM Total Memory (B)": str(192 * GIB), "VRAM Total Used Memory (B)": str(100 * GIB)},
    "card2": {"VRAM Total Memory (B)": str(192 * GIB), "VRAM Total Used Memory (B)": str(0)},
})


def test_amd_smi_lists_amd_gpus(tmp_path):
    r = machine(tmp_path, {"amd-smi": AMD_SMI})
    assert [(g.index, g.vendor, round(g.free_gib, 2)) for g in r.gpus] == [(0, "amd", 191.98), (1, "amd", 95.99)]
    assert r.mask_variable == "HIP_VISIBLE_DEVICES" and r.sources["gpus"] == "amd-smi"


def test_rocm_smi_is_the_fallback_for_amd(tmp_path):
    r = machine(tmp_path, {"rocm-smi": ROCM_SMI})
    assert [(g.index, g.free_gib) for g in r.gpus] == [(0, 190.0), (1, 92.0), (2, 192.0)]


def test_hip_visible_devices_selects_amd_gpus(tmp_path):
    r = machine(tmp_path, {"rocm-smi": ROCM_SMI}, {"HIP_VISIBLE_DEVICES": "2"})
    assert [(g.index, g.free_gib) for g in r.gpus] == [(2, 192.0)]


def test_hip_ids_index_into_what_rocr_visible_devices_left(tmp_path):
    r = machine(tmp_path, {"rocm-smi": ROCM_SMI}, {"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"})
    assert [(g.index, g.free_gib) for g in r.gpus] == [(1, 192.0)]  # position 1 of (1, 2): physical card 2


def test_rocr_mask_naming_an_absent_device_is_reported(tmp_path):
    r = machine(tmp_path, {"rocm-smi": ROCM_SMI}, {"ROCR_VISIBLE_DEVICES": "0,5"})
    assert r.mask_error.startswith("ROCR_VISIBLE_DEVICES=0,5 names device(s) 5 that this machine does not have; rocm-smi lists 3")


def test_env_overrides_replace_the_listing_and_the_free_memory(tmp_path):
    r = machine(tmp_path, {"nvidia-smi": NVIDIA_4}, {"PRIMUS_AUTO_NUM_GPUS": "8", "PRIMUS_AUTO_FREE_VRAM_GB": "80"})
    assert len(r.gpus) == 8 and {g.free_gib for g in r.gpus} == {80.0}
    assert r.sources["free_vram"] == "PRIMUS_AUTO_FREE_VRAM_GB"


def test_free_vram_override_csv_is_per_gpu_and_a_mask_still_applies(tmp_path):
    r = machine(tmp_path, {}, {"PRIMUS_AUTO_NUM_GPUS": "4", "PRIMUS_AUTO_FREE_VRAM_GB": "10,20,30,40",
                               "CUDA_VISIBLE_DEVICES": "2,3"})
    assert [(g.index, g.free_gib) for g in r.gpus] == [(2, 30.0), (3, 40.0)]


@pytest.mark.parametrize("env, line", [
    ({"PRIMUS_AUTO_NUM_GPUS": "two"}, "PRIMUS_AUTO_NUM_GPUS=two: must be an integer >= 0"),
    ({"PRIMUS_AUTO_NUM_GPUS": "2", "PRIMUS_AUTO_FREE_VRAM_GB": "-1"}, "PRIMUS_AUTO_FREE_VRAM_GB=-1: must be a number >= 0"),
    ({"PRIMUS_AUTO_NUM_GPUS": "2", "PRIMUS_AUTO_FREE_VRAM_GB": "nan"}, "PRIMUS_AUTO_FREE_VRAM_GB=nan: must be a number >= 0"),
    ({"PRIMUS_AUTO_NUM_GPUS": "2", "PRIMUS_AUTO_FREE_VRAM_GB": "1,2,3"},
     "PRIMUS_AUTO_FREE_VRAM_GB has 3 values for 2 visible GPU(s); give one value, or one per GPU"),
    ({"PRIMUS_AUTO_VCPUS": "0"}, "PRIMUS_AUTO_VCPUS=0: must be an integer > 0"),
    ({"PRIMUS_AUTO_RAM_GB": "lots"}, "PRIMUS_AUTO_RAM_GB=lots: must be a number >= 0"),
])
def test_a_bad_override_is_one_line(tmp_path, env, line):
    with pytest.raises(ConfigValidationError) as error:
        machine(tmp_path, {}, env)
    assert error.value.failures == [line]


def test_vcpus_follow_affinity(tmp_path):
    r = machine(tmp_path)
    assert r.cpu_ids == tuple(sorted(os.sched_getaffinity(0))) and r.vcpus == len(r.cpu_ids)


def test_vcpus_override(tmp_path):
    r = machine(tmp_path, env={"PRIMUS_AUTO_VCPUS": "96"})
    assert r.vcpus == 96 and len(r.cpu_ids) == 96


def test_cgroup_v2_cpu_quota_trims_the_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    r = machine(tmp_path, cgroup={"cpu.max": "250000 100000"})
    assert r.cpu_ids == (0, 1, 2) and r.vcpus == 3 and "cgroup cpu quota 2.5" in r.sources["vcpus"]


def test_cgroup_v2_unlimited_cpu_keeps_the_affinity(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6, 7})
    assert machine(tmp_path, cgroup={"cpu.max": "max 100000"}).cpu_ids == (4, 5, 6, 7)


def test_cgroup_v1_cpu_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    r = machine(tmp_path, cgroup={"cpu,cpuacct/cpu.cfs_quota_us": "200000", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
                self_cgroup="4:cpu,cpuacct:/\n")
    assert r.vcpus == 2


def test_ram_from_meminfo_without_cgroup_limits(tmp_path):
    r = machine(tmp_path, meminfo_kib=64 * 1024 * 1024)
    assert r.ram_available_gib == 64.0 and r.sources["ram"] == "/proc/meminfo MemAvailable"


def test_cgroup_v2_memory_limit_minus_usage_wins_when_tighter(tmp_path):
    r = machine(tmp_path, meminfo_kib=256 * 1024 * 1024, cgroup={
        "memory.max": str(16 * GIB), "memory.current": str(10 * GIB), "memory.stat": f"anon 1\ninactive_file {2 * GIB}\n"})
    assert r.ram_available_gib == 8.0 and r.sources["ram"] == "cgroup memory limit - usage"


def test_the_process_cgroup_path_and_its_parents_count(tmp_path):
    r = machine(tmp_path, meminfo_kib=256 * 1024 * 1024, self_cgroup="0::/job/step\n", cgroup={
        "job/memory.max": str(12 * GIB), "job/memory.current": str(2 * GIB),
        "job/step/memory.max": "max", "job/step/memory.current": str(1 * GIB)})
    assert r.ram_available_gib == 10.0


def test_cgroup_v2_unlimited_memory_keeps_meminfo(tmp_path):
    r = machine(tmp_path, meminfo_kib=8 * 1024 * 1024, cgroup={"memory.max": "max", "memory.current": str(GIB)})
    assert r.ram_available_gib == 8.0


def test_cgroup_v1_memory_limit(tmp_path):
    r = machine(tmp_path, meminfo_kib=256 * 1024 * 1024, self_cgroup="5:memory:/\n", cgroup={
        "memory/memory.limit_in_bytes": str(32 * GIB), "memory/memory.usage_in_bytes": str(8 * GIB)})
    assert r.ram_available_gib == 24.0


def test_cgroup_v1_unlimited_memory_is_ignored(tmp_path):
    r = machine(tmp_path, meminfo_kib=4 * 1024 * 1024, cgroup={
        "memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": str(GIB)})
    assert r.ram_available_gib == 4.0


def test_ram_override(tmp_path):
    assert machine(tmp_path, env={"PRIMUS_AUTO_RAM_GB": "400"}).ram_available_gib == 400.0
