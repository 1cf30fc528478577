"""task=preflight's worker: one process per node runs preflight_checks.py, then the checks that need the job's
process group (the shared run dir, clock skew, a quick GEMM and all_reduce against the hardware entry), gathers
every node's checks on all ranks and writes preflight.json and preflight.md (node 0). Any FAIL: exit code 1."""
from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any, Optional

import torch.distributed as dist

from primus_hydra.backends.common.distributed import all_gather_objects
from primus_hydra.benchmark import collectives, gemm
from primus_hydra.benchmark.cases import PREFLIGHT_ALL_REDUCE_BYTES, PREFLIGHT_GEMM, CollectiveCase
from primus_hydra.benchmark.preflight_checks import Check, gpu_checks, host_checks, network_checks, write_probe
from primus_hydra.benchmark.worker import MeasuringWorker
from primus_hydra.config.paths import absolute_user_path
from primus_hydra.errors import PrimusError
from primus_hydra.orchestrator.hardware_entry import configured_hardware_entry

log = logging.getLogger("primus_hydra.preflight")

RESULTS_FILE, REPORT_FILE = "preflight.json", "preflight.md"
WARN_BELOW, FAIL_BELOW = 0.70, 0.40  # of the hardware entry's expected number
SLOW_NODE = 0.80  # of the median of the nodes
CLOCK_WARN_S, CLOCK_FAIL_S = 0.5, 5.0


class PreflightFailed(PrimusError):
    exit_code = 1


def node_name(dist_env: Any) -> str:
    return os.environ.get("SLURMD_NODENAME") or f"{socket.gethostname()}#{dist_env.node_rank}"


def versus(name: str, measured: float, expected: Optional[float], unit: str, what: str) -> Check:
    if not expected:
        return Check(name, "PASS", f"{measured:.3g} {unit} ({what}; no expected number to compare)")
    ratio = measured / expected
    status = "FAIL" if ratio < FAIL_BELOW else "WARN" if ratio < WARN_BELOW else "PASS"
    return Check(name, status, f"{measured:.3g} {unit} = {100 * ratio:.0f} % of the expected {expected:.3g} ({what})")


class PreflightRunner(MeasuringWorker):
    def init(self) -> None:
        self.node = node_name(self.dist)

    def train(self) -> dict:
        environ = dict(os.environ)
        # the user's folder (moved aside from module.checkpoint.dir: tasks/preflight.py), else the run's default
        chosen = self.cfg.task.checkpoint_dir
        checkpoint_dir = Path(absolute_user_path(chosen) if chosen else self.cfg.module.checkpoint.dir)
        checks = host_checks(environ, {"output_root": self.run_dir.parent, "checkpoint_dir": checkpoint_dir})
        checks += gpu_checks(environ, self.cfg.task.processes_per_node)
        checks += network_checks(environ)
        checks.append(self._shared_dir_check())
        if self.layout.world_size > 1 and self.dist.rank == 0:  # every node met at the rendezvous to get here
            checks.append(Check("net.rendezvous", "PASS", f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
                                                          f"reached by all {self.layout.world_size} nodes"))
        measured = {"gemm_tflops": self._gemm_tflops()}
        checks.append(versus("perf.gemm", measured["gemm_tflops"], self._expected_gemm(), "TFLOP/s", self._gemm_label))
        if self.layout.world_size > 1:
            measured["all_reduce_busbw_gbps"] = self._all_reduce_busbw()
            checks.append(versus("perf.all_reduce", measured["all_reduce_busbw_gbps"], self._expected_bandwidth(),
                                 "GB/s bus bandwidth", f"{PREFLIGHT_ALL_REDUCE_BYTES // 2 ** 20} MiB over {self.layout.world_size} ranks"))
        for check in checks:
            check.node = self.node
        nodes = all_gather_objects({"node": self.node, "time": time.time(), "checks": [c.as_dict() for c in checks],
                              "measured": measured})
        all_checks = [Check(**c) for node in nodes for c in node["checks"]] + compare_nodes(nodes)
        failed = [check for check in all_checks if check.status == "FAIL"]
        if self.dist.is_main:
            self._write(nodes, all_checks)
        if failed:
            raise PreflightFailed(f"preflight: {len(failed)} check(s) failed: "
                                  + "; ".join(f"{c.node} {c.name}: {c.detail}" for c in failed[:3])
                                  + f" (all of them: {self.run_dir / REPORT_FILE})")
        return {"checks": len(all_checks), "failed": 0}

    # -- checks that need the group ------------------------------------------------------------------------------
    def _barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier()

    def _shared_dir_check(self) -> Check:
        """Node 0 writes a file in the shared dir (task.shared_dir, default: the run dir); every node must see it."""
        folder = Path(str(self.cfg.task.shared_dir or self.run_dir))
        name = ".primus_preflight_shared"
        token, problem = f"{os.getpid()}-{time.time_ns()}", None
        if self.dist.rank == 0:
            problem = write_probe(folder, name, token, keep=True)
        written = all_gather_objects({"token": token, "problem": problem})[0]
        seen = written["problem"] is None and (folder / name).is_file() and (folder / name).read_text() == written["token"]
        self._barrier()
        if self.dist.rank == 0 and written["problem"] is None:
            (folder / name).unlink(missing_ok=True)
        if written["problem"] is not None:
            return Check("shared_dir", "FAIL", f"node 0 cannot write a file in {folder}: {written['problem']}")
        if self.layout.world_size == 1:
            return Check("shared_dir", "PASS" if seen else "FAIL", f"{folder} is writable (one node: nothing to share)"
                         if seen else f"node 0 wrote {folder / name} but does not read it back")
        return Check("shared_dir", "PASS" if seen else "FAIL",
                     f"sees the file node 0 wrote in {folder}" if seen else
                     f"does not see the file node 0 wrote in {folder}: the run dir must be shared by every node")

    @property
    def _gemm_label(self) -> str:
        size, dtype = self._gemm_case()
        return f"{size}^3 {dtype} matmul"

    def _gemm_case(self) -> tuple[int, str]:
        return PREFLIGHT_GEMM[self.device.type == "cuda"]

    def _gemm_tflops(self) -> float:
        size, dtype = self._gemm_case()
        return gemm.measure(size, size, size, dtype, self.device, warmup=3, iters=10, peak_tflops=None)["tflops"]

    def _hardware(self) -> Any:
        return configured_hardware_entry(self.cfg)

    def _expected_gemm(self) -> Optional[float]:
        """The hardware entry's bf16 peak x its matmul efficiency; none for the cpu entry, whose peak is itself a
        measurement (the number is reported, with no threshold)."""
        entry = self._hardware()
        if self.device.type == "cpu" or entry.vendor == "cpu":
            return None
        peak = entry.get("peak_tflops_bf16")
        return float(peak) * float(entry.matmul_efficiency) if peak else None

    def _all_reduce_busbw(self) -> float:
        case = CollectiveCase("all_reduce", PREFLIGHT_ALL_REDUCE_BYTES, "world", self.layout.world_size)
        return collectives.measure(case, None, self.device, warmup=2, iters=5)["busbw_gbps"]

    def _expected_bandwidth(self) -> Optional[float]:
        entry = self._hardware()
        if self.device.type == "cpu" or entry.vendor == "cpu":  # gloo over loopback: reported, no threshold
            return None
        key = "inter_node_bandwidth_gbps" if int(self.cfg.launch.nnodes) > 1 else "intra_node_bandwidth_gbps"
        value = entry.get(key)
        return float(value) if value else None

    # -- the report ----------------------------------------------------------------------------------------------
    def _write(self, nodes: list[dict], checks: list[Check]) -> None:
        data = {"nodes": [{"node": n["node"], "measured": n["measured"]} for n in nodes],
                "checks": [check.as_dict() for check in checks]}
        (self.run_dir / RESULTS_FILE).write_text(json.dumps(data, indent=1))
        lines = [f"# Preflight: {len(nodes)} node(s)", "", "| status | node | check | detail |", "|---|---|---|---|"]
        lines += [f"| {c.status} | {c.node} | {c.name} | {c.detail.replace('|', '/')} |" for c in checks]
        (self.run_dir / REPORT_FILE).write_text("\n".join(lines) + "\n")
        width = max(len(c.node) for c in checks)
        for check in checks:
            print(f"{check.status:<4}  {check.node:<{width}}  {check.name:<26} {check.detail}", flush=True)
        counts = {status: sum(c.status == status for c in checks) for status in ("PASS", "WARN", "FAIL")}
        print(f"preflight: {counts['PASS']} PASS, {counts['WARN']} WARN, {counts['FAIL']} FAIL "
              f"({self.run_dir / REPORT_FILE})", flush=True)


def compare_nodes(nodes: list[dict]) -> list[Check]:
    """What only the nodes side by side show: drivers that differ, clocks that drift, a slow node."""
    checks = []
    drivers = {node["node"]: next((c["detail"] for c in node["checks"] if c["name"] == "gpu.driver"), None)
               for node in nodes}
    if len(set(drivers.values()) - {None}) > 1:
        checks.append(Check("cluster.driver", "FAIL", "GPU drivers differ: " + ", ".join(f"{n}: {d}" for n, d in drivers.items()), "all"))
    reference = nodes[0]["time"]
    for node in nodes[1:]:
        skew = abs(node["time"] - reference)
        status = "FAIL" if skew > CLOCK_FAIL_S else "WARN" if skew > CLOCK_WARN_S else "PASS"
        checks.append(Check("cluster.clock", status, f"{skew:.3f} s from node 0's clock (after a barrier)", node["node"]))
    speeds = [node["measured"]["gemm_tflops"] for node in nodes]
    if len(speeds) > 1:
        median = statistics.median(speeds)
        for node, speed in zip(nodes, speeds):
            if speed < SLOW_NODE * median:
                checks.append(Check("cluster.slow_node", "WARN", f"GEMM {speed:.3g} TFLOP/s, {100 * speed / median:.0f} % "
                                    f"of the nodes' median {median:.3g}", node["node"]))
    return checks
