"""task=preflight's node checks on faked machines: vendor tools on PATH for each GPU field, interfaces, HCAs,
MASTER_ADDR, folders that are read-only or full."""
from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from helpers.read_only import read_only_folder
from primus_hydra.benchmark.preflight_checks import folder_checks, gpu_checks, network_checks

H100 = "{i}, NVIDIA H100 80GB HBM3, 81559, {driver}, {ecc}, {retired}, 00000000:{bus:02x}:00.0"


def fake_nvidia_smi(folder: Path, rows: list[str]) -> dict:
    """An nvidia-smi that answers the name query with names only and every other query with the CSV rows."""
    folder.mkdir(exist_ok=True)
    names = "\n".join(row.split(", ")[1] for row in rows)
    script = folder / "nvidia-smi"
    banner = "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |"
    script.write_text(f"#!/bin/sh\ncase \"$*\" in\n  *query-gpu=name\\ *) {shutil.which('cat')} <<'EOF'\n{names}\nEOF\n;;\n"
                      f"  '') echo '{banner}';;\n"
                      f"  *) {shutil.which('cat')} <<'EOF'\n" + "\n".join(rows) + "\nEOF\n;;\nesac\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": str(folder)}


def statuses(checks, name):
    return [check.status for check in checks if check.name == name]


def rows(count=8, driver="550.54.15", ecc=0, retired="No"):
    return [H100.format(i=i, driver=driver, ecc=ecc, retired=retired, bus=0x18 + i) for i in range(count)]


def test_gpu_fields_from_nvidia_smi(tmp_path):
    sys_root = tmp_path / "sys"
    bus = sys_root / "bus" / "pci" / "devices" / "0000:18:00.0"
    bus.mkdir(parents=True)
    (bus / "numa_node").write_text("1\n")
    checks = gpu_checks(fake_nvidia_smi(tmp_path / "bin", rows()), processes_per_node=8, sys_root=sys_root)
    by_name = {check.name: check for check in checks}
    assert by_name["gpu.count"].status == "PASS" and "8 GPU(s)" in by_name["gpu.count"].detail
    assert by_name["gpu.model"].detail == "NVIDIA H100 80GB HBM3, 79.6 GiB"
    assert by_name["gpu.driver"].detail == "driver 550.54.15, CUDA 12.4"
    assert by_name["gpu.ecc"].status == "PASS" and by_name["gpu.numa"].detail == "GPU NUMA nodes: 0->1"


@pytest.mark.parametrize("fault, name, expected", [
    (dict(count=4), "gpu.count", "4 GPU(s) visible for launch.nproc_per_node=8"),
    (dict(ecc=3), "gpu.ecc", "GPU 0: 3 uncorrected ECC error(s)"),
    (dict(retired="Yes"), "gpu.retired_pages", "GPU 0: retired pages pending"),
], ids=["too_few", "ecc", "retired_pages"])
def test_a_bad_gpu_field_fails(tmp_path, fault, name, expected):
    checks = gpu_checks(fake_nvidia_smi(tmp_path / "bin", rows(**fault)), processes_per_node=8, sys_root=tmp_path)
    failing = [check for check in checks if check.name == name and check.status == "FAIL"]
    assert failing and expected in failing[0].detail


def test_two_drivers_on_one_node_fail(tmp_path):
    mixed = rows(4) + [H100.format(i=4, driver="535.104.05", ecc=0, retired="No", bus=0x30)]
    checks = gpu_checks(fake_nvidia_smi(tmp_path / "bin", mixed), processes_per_node=5, sys_root=tmp_path)
    assert statuses(checks, "gpu.driver") == ["FAIL"]


def test_gpu_fields_from_amd_smi(tmp_path):
    from test_resources import fake_tool

    static = [{"gpu": i, "asic": {"market_name": "AMD Instinct MI300X"}, "vram": {"size": {"value": 196592, "unit": "MB"}},
               "driver": {"version": "6.8.5"}, "ecc": {"total_uncorrectable_count": 0}} for i in range(8)]
    fake_tool(tmp_path / "bin", "amd-smi", json.dumps(static))
    checks = gpu_checks({"PATH": str(tmp_path / "bin")}, processes_per_node=8, sys_root=tmp_path)
    by_name = {check.name: check for check in checks}
    assert by_name["gpu.count"].status == "PASS"
    assert by_name["gpu.model"].detail == "AMD Instinct MI300X, 192.0 GiB"
    assert by_name["gpu.driver"].detail.startswith("driver 6.8.5, ROCm")
    assert by_name["gpu.ecc"].status == "PASS"


def test_no_gpu_is_a_warning_not_a_crash(tmp_path):
    assert statuses(gpu_checks({"PATH": str(tmp_path)}, processes_per_node=None), "gpu.count") == ["WARN"]


def net_root(tmp_path: Path, interfaces=("lo", "eth0"), hcas=()) -> Path:
    for name in interfaces:
        (tmp_path / "class" / "net" / name).mkdir(parents=True)
    for name in hcas:
        (tmp_path / "class" / "infiniband" / name).mkdir(parents=True)
    return tmp_path


def test_interface_variables_must_name_existing_interfaces(tmp_path):
    interfaces = {"lo": True, "eth0": True}  # name: has an IP address
    ok = network_checks({"NCCL_SOCKET_IFNAME": "eth", "GLOO_SOCKET_IFNAME": "lo"}, sys_root=tmp_path,
                        interfaces=interfaces)
    assert statuses(ok, "net.NCCL_SOCKET_IFNAME") == ["PASS"] and statuses(ok, "net.GLOO_SOCKET_IFNAME") == ["PASS"]
    bad = network_checks({"NCCL_SOCKET_IFNAME": "ib"}, sys_root=tmp_path, interfaces=interfaces)
    (check,) = [c for c in bad if c.name == "net.NCCL_SOCKET_IFNAME"]
    assert check.status == "FAIL" and check.detail == ("NCCL_SOCKET_IFNAME=ib: no network interface whose name starts "
                                                       "with ib on this machine (it has eth0, lo); name one of them or "
                                                       "unset it")
    exact = network_checks({"NCCL_SOCKET_IFNAME": "=eth"}, sys_root=tmp_path, interfaces=interfaces)  # `=`: eth0 is not eth
    assert statuses(exact, "net.NCCL_SOCKET_IFNAME") == ["FAIL"]


def test_infiniband_expected_without_rdma_devices_fails(tmp_path):
    checks = network_checks({"NCCL_IB_HCA": "mlx5_0:1"}, sys_root=net_root(tmp_path))
    assert statuses(checks, "net.NCCL_IB_HCA") == ["FAIL"] and statuses(checks, "net.rdma") == ["FAIL"]
    present = network_checks({"NCCL_IB_HCA": "mlx5_0"}, sys_root=net_root(tmp_path / "ib", hcas=("mlx5_0",)))
    assert statuses(present, "net.NCCL_IB_HCA") == ["PASS"] and statuses(present, "net.rdma") == ["PASS"]


def test_master_addr_must_resolve(tmp_path):
    root = net_root(tmp_path)
    assert statuses(network_checks({"MASTER_ADDR": "127.0.0.1"}, sys_root=root), "net.master_addr") == ["PASS"]
    assert statuses(network_checks({"MASTER_ADDR": "no-such-host.invalid"}, sys_root=root), "net.master_addr") == ["FAIL"]


def test_a_read_only_output_root_fails(tmp_path):
    with read_only_folder(tmp_path / "ro") as folder:
        checks = folder_checks("output_root", folder / "outputs")
    assert statuses(checks, "writable.output_root") == ["FAIL"]


def test_a_full_output_root_fails(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a full folder needs a small tmpfs, which this machine refuses: {mounted.stderr.strip()}")
    try:
        checks = folder_checks("output_root", folder)
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)
    (check,) = [c for c in checks if c.name == "disk.output_root"]
    assert check.status == "FAIL" and "GiB free" in check.detail


def test_perf_against_the_hardware_entry_warns_under_70_and_fails_under_40_percent():
    from primus_hydra.benchmark.preflight import versus

    assert versus("perf.gemm", 700.0, 1000.0, "TFLOP/s", "x").status == "PASS"
    assert versus("perf.gemm", 690.0, 1000.0, "TFLOP/s", "x").status == "WARN"
    assert versus("perf.gemm", 390.0, 1000.0, "TFLOP/s", "x").status == "FAIL"
    unknown = versus("perf.gemm", 0.3, None, "TFLOP/s", "x")  # the cpu entry: the number, no threshold
    assert unknown.status == "PASS" and "no expected number" in unknown.detail


def test_nodes_side_by_side_name_the_slow_node_the_drifting_clock_and_differing_drivers():
    from primus_hydra.benchmark.preflight import compare_nodes

    def node(name, tflops, clock, driver):
        return {"node": name, "time": clock, "measured": {"gemm_tflops": tflops},
                "checks": [{"name": "gpu.driver", "status": "PASS", "detail": f"driver {driver}", "node": name}]}

    nodes = [node("n1", 700, 100.0, "550"), node("n2", 710, 100.2, "550"), node("n3", 500, 107.0, "535"),
             node("n4", 690, 100.9, "550")]
    checks = compare_nodes(nodes)
    slow = [(c.node, c.status) for c in checks if c.name == "cluster.slow_node"]
    assert slow == [("n3", "WARN")]  # 500 < 0.8 x the median 695
    clocks = {c.node: c.status for c in checks if c.name == "cluster.clock"}
    assert clocks == {"n2": "PASS", "n3": "FAIL", "n4": "WARN"}
    assert [c.status for c in checks if c.name == "cluster.driver"] == ["FAIL"]
