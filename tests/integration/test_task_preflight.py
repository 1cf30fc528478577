"""task=preflight on this machine: PASS/WARN/FAIL lines, preflight.md and preflight.json, exit 1 on a FAIL."""
from __future__ import annotations

import json

from helpers.cli import primus
from helpers.read_only import read_only_folder


def test_preflight_on_this_node_writes_its_report(tmp_path):
    run_dir = tmp_path / "run"
    result = primus("task=preflight", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((run_dir / "preflight.json").read_text())
    assert len(data["nodes"]) == 1 and data["nodes"][0]["measured"]["gemm_tflops"] > 0
    names = {check["name"]: check for check in data["checks"]}
    assert {"host.cpu", "host.memory", "disk.output_root", "writable.checkpoint_dir", "gpu.count", "shared_dir",
            "perf.gemm"} <= set(names)
    assert names["gpu.count"]["status"] == "WARN"  # this machine has no GPU: said, not a crash
    assert all(check["status"] in ("PASS", "WARN") for check in data["checks"])
    assert "| PASS |" in (run_dir / "preflight.md").read_text()
    assert any(line.startswith("WARN ") and "gpu.count" in line for line in result.stdout.splitlines())


def test_a_missing_interface_fails_the_preflight_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    result = primus("task=preflight", f"hydra.run.dir={run_dir}", cwd=tmp_path, env={"NCCL_SOCKET_IFNAME": "nosuch0"})
    assert result.returncode == 1, result.stderr[-2000:]
    (check,) = [c for c in json.loads((run_dir / "preflight.json").read_text())["checks"] if c["name"] == "net.NCCL_SOCKET_IFNAME"]
    assert check["status"] == "FAIL"
    assert check["detail"].startswith("NCCL_SOCKET_IFNAME=nosuch0: no network interface whose name starts with nosuch0 ")
    assert "nosuch0" in result.stderr  # the one error line names it too


def test_a_read_only_checkpoint_dir_fails_the_preflight(tmp_path):
    run_dir = tmp_path / "run"
    with read_only_folder(tmp_path / "ro") as folder:
        result = primus("task=preflight", f"hydra.run.dir={run_dir}", f"module.checkpoint.dir={folder}/ckpt", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    checks = json.loads((run_dir / "preflight.json").read_text())["checks"]
    assert [c["status"] for c in checks if c["name"] == "writable.checkpoint_dir"] == ["FAIL"]
