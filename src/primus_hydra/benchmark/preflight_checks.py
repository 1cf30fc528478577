"""task=preflight's checks of one node that need no torch: host, GPUs (from the vendor tools), network variables.

Each check is a Check(name, status, detail) with status PASS, WARN or FAIL; a node's checks are gathered on node 0
by preflight.py, which adds the checks that compare nodes (versions, clocks, the shared dir, speed).
"""
from __future__ import annotations

import os
import re
import shutil
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional

from primus_hydra.backends.cpu_peak_cache import cpu_model
from primus_hydra.orchestrator.gpu_probe import detect_gpu_model, detect_gpus, run_tool, run_tool_json
from primus_hydra.orchestrator.host_probe import detect_ram_gib
from primus_hydra.orchestrator.network_interfaces import interface_problem, machine_interfaces

GIB = 1024.0 ** 3
DISK_FAIL_GIB, DISK_WARN_GIB = 1.0, 10.0
SOCKET_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
HCA_VARIABLES = ("NCCL_IB_HCA",)  # RCCL reads the NCCL_ names


@dataclass
class Check:
    name: str
    status: str  # PASS | WARN | FAIL
    detail: str
    node: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


# -- host -------------------------------------------------------------------------------------------------------
def host_checks(environ: Mapping[str, str], folders: dict[str, Path], sys_root: Path = Path("/sys")) -> list[Check]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ram, _ = detect_ram_gib(environ, Path("/sys/fs/cgroup"), Path("/proc"))
    numa = sorted(path.name for path in (sys_root / "devices" / "system" / "node").glob("node[0-9]*"))
    checks = [Check("host.cpu", "PASS", f"{cpu_model()}, {cores} core(s) given to the job"),
              Check("host.memory", "PASS" if ram and ram >= 4 else "WARN",
                    f"{ram:.1f} GiB available" if ram is not None else "available memory unknown"),
              Check("host.numa", "PASS", f"{len(numa) or 1} NUMA node(s)")]
    for label, folder in folders.items():
        checks += folder_checks(label, folder)
    return checks


def folder_checks(label: str, folder: Path) -> list[Check]:
    """Free space where a run writes, and that it can write there: a probe file written and removed, in the folder
    itself (created for the probe when missing, and removed again)."""
    folder = Path(folder)
    existing = nearest_existing(folder)
    free = shutil.disk_usage(existing).free / GIB
    status = "FAIL" if free < DISK_FAIL_GIB else "WARN" if free < DISK_WARN_GIB else "PASS"
    where = f"under {folder}" if existing == folder else f"under {existing} ({folder} does not exist yet)"
    checks = [Check(f"disk.{label}", status, f"{free:.1f} GiB free {where} (FAIL below {DISK_FAIL_GIB:g}, "
                                              f"WARN below {DISK_WARN_GIB:g})")]
    problem = write_probe(folder, f".primus_preflight_write_{socket.gethostname()}_{os.getpid()}")
    if problem:
        checks.append(Check(f"writable.{label}", "FAIL", f"{folder}: {problem}"))
    else:
        checks.append(Check(f"writable.{label}", "PASS", f"{folder} is writable" if existing == folder else
                            f"{folder} can be created and written"))
    return checks


def nearest_existing(folder: Path) -> Path:
    existing = Path(folder)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def write_probe(folder: Path, name: str, text: str = "preflight", keep: bool = False) -> Optional[str]:
    """Write `text` to folder/name (creating the missing folders), then remove it and the folders it created unless
    `keep`; None when that worked, else what failed and why, exactly (the call, the path, the OS's reason)."""
    created: list[Path] = []
    for attempt in range(3):  # nodes probing one shared folder at once: another's clean-up may remove it under us
        try:
            created = create_missing(folder)
            (folder / name).write_text(text)
            break
        except FileNotFoundError as error:
            remove_created(created)
            if attempt == 2:
                return os_error_text(error)
        except OSError as error:
            remove_created(created)
            return os_error_text(error)
    if not keep:
        (folder / name).unlink(missing_ok=True)
        remove_created(created)
    return None


def create_missing(folder: Path) -> list[Path]:
    """mkdir of each missing folder from the top down; the folders it created, in that order."""
    missing = []
    for parent in [Path(folder), *Path(folder).parents]:
        if parent.exists():
            break
        missing.append(parent)
    created = []
    try:
        for path in reversed(missing):
            try:
                path.mkdir()
            except FileExistsError:  # another node made it a moment ago: a folder is what was wanted
                if not path.is_dir():
                    raise
                continue
            created.append(path)
    except OSError:
        remove_created(created)
        raise
    return created


def remove_created(created: list[Path]) -> None:
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:
            pass  # something else wrote into it meanwhile: it stays


def os_error_text(error: OSError) -> str:
    """`cannot create /x/y: Permission denied`: the operation from the error's kind, the path, the OS's reason."""
    path = error.filename or "?"
    action = "cannot create" if not Path(path).exists() else "cannot write"
    return f"{action} {path}: {error.strerror or error}"


# -- GPUs -------------------------------------------------------------------------------------------------------
NVIDIA_FIELDS = "index,name,memory.total,driver_version,ecc.errors.uncorrected.volatile.total,retired_pages.pending,pci.bus_id"


def gpu_inventory(environ: Mapping[str, str]) -> list[dict]:
    """One dict per GPU: index, name, memory_gib, driver, ecc_errors, retired_pending, pci_bus (None: not reported)."""
    output = run_tool(["nvidia-smi", f"--query-gpu={NVIDIA_FIELDS}", "--format=csv,noheader,nounits"], environ)
    gpus = []
    for line in (output or "").splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 7 or not fields[0].isdigit():
            continue
        number = lambda text: float(text) if text.replace(".", "", 1).isdigit() else None  # noqa: E731 - "[N/A]"
        gpus.append({"index": int(fields[0]), "name": fields[1], "memory_gib": (number(fields[2]) or 0) / 1024 or None,
                     "driver": fields[3], "ecc_errors": number(fields[4]), "retired_pending": fields[5],
                     "pci_bus": fields[6], "vendor": "nvidia"})
    if gpus:
        return gpus
    data = run_tool_json(["amd-smi", "static", "--asic", "--vram", "--driver", "--json"], environ)
    entries = data.get("gpu_data", [data]) if isinstance(data, dict) else data if isinstance(data, list) else []
    for entry in entries:
        if not isinstance(entry, dict) or not str(entry.get("gpu", "")).isdigit():
            continue
        vram = ((entry.get("vram") or {}).get("size") or {})
        size, unit = vram.get("value"), str(vram.get("unit", "MB")).upper()
        memory = None if size is None else float(size) / (1024 if unit == "MB" else 1)
        gpus.append({"index": int(entry["gpu"]), "name": (entry.get("asic") or {}).get("market_name"),
                     "memory_gib": memory, "driver": (entry.get("driver") or {}).get("version"),
                     "ecc_errors": (entry.get("ecc") or {}).get("total_uncorrectable_count"),
                     "retired_pending": (entry.get("ras") or {}).get("pending_retired_pages"),
                     "pci_bus": (entry.get("bus") or {}).get("bdf"), "vendor": "amd"})
    return gpus


def runtime_version(environ: Mapping[str, str], vendor: Optional[str]) -> str:
    """`CUDA <version>` from nvidia-smi's banner, or `ROCm <version>` from amd-smi; `... not reported` otherwise."""
    if vendor == "amd":
        data = run_tool_json(["amd-smi", "version", "--json"], environ)
        entry = data[0] if isinstance(data, list) and data else data if isinstance(data, dict) else {}
        version = entry.get("rocm_version") if isinstance(entry, dict) else None
        return f"ROCm {version}" if version else "ROCm version not reported"
    match = re.search(r"CUDA Version:\s*([0-9.]+)", run_tool(["nvidia-smi"], environ) or "")
    return f"CUDA {match.group(1)}" if match else "CUDA version not reported"


def gpu_checks(environ: Mapping[str, str], processes_per_node: Optional[int], sys_root: Path = Path("/sys")) -> list[Check]:
    inventory = gpu_inventory(environ)
    detected = detect_gpus(environ)
    count = len(detected.gpus) or len(inventory)
    if count == 0:
        return [Check("gpu.count", "WARN", "no GPU on this node (nvidia-smi, amd-smi, rocm-smi); the CPU parts ran")]
    wanted = processes_per_node
    checks = [Check("gpu.count", "FAIL" if wanted and count < wanted else "PASS",
                    f"{count} GPU(s) visible" + (f" for launch.nproc_per_node={wanted}" if wanted else ""))]
    model = detect_gpu_model(environ) or (inventory[0]["name"] if inventory else None)
    memory = sorted({round(gpu["memory_gib"], 1) for gpu in inventory if gpu["memory_gib"]})
    checks.append(Check("gpu.model", "PASS", f"{model or 'unknown model'}"
                        + (f", {'/'.join(map(str, memory))} GiB" if memory else "")))
    drivers = sorted({str(gpu["driver"]) for gpu in inventory if gpu["driver"]})
    runtime = runtime_version(environ, inventory[0]["vendor"] if inventory else detected.vendor)
    checks.append(Check("gpu.driver", "PASS" if len(drivers) <= 1 else "FAIL",
                        f"driver {', '.join(drivers) or 'not reported'}, {runtime}"))  # compared across nodes
    for gpu in inventory:
        if gpu["ecc_errors"]:
            checks.append(Check("gpu.ecc", "FAIL", f"GPU {gpu['index']}: {int(gpu['ecc_errors'])} uncorrected ECC error(s)"))
        pending = str(gpu["retired_pending"] or "").strip().lower()
        if pending in ("yes", "true") or (pending.isdigit() and int(pending) > 0):
            checks.append(Check("gpu.retired_pages", "FAIL", f"GPU {gpu['index']}: retired pages pending (reset the GPU)"))
    if inventory and not any(check.name in ("gpu.ecc", "gpu.retired_pages") for check in checks):
        reported = any(gpu["ecc_errors"] is not None for gpu in inventory)
        checks.append(Check("gpu.ecc", "PASS" if reported else "WARN",
                            "no uncorrected ECC errors, no pending retired pages" if reported else "ECC not reported"))
    numa = {}
    for gpu in inventory:
        bus = str(gpu["pci_bus"] or "").lower().replace("00000000:", "0000:")
        node_file = sys_root / "bus" / "pci" / "devices" / bus / "numa_node"
        if bus and node_file.is_file():
            numa[gpu["index"]] = node_file.read_text().strip()
    if numa:
        checks.append(Check("gpu.numa", "PASS", "GPU NUMA nodes: " + ", ".join(f"{i}->{n}" for i, n in sorted(numa.items()))))
    return checks


# -- network and environment ----------------------------------------------------------------------------------
def network_checks(environ: Mapping[str, str], sys_root: Path = Path("/sys"),
                   interfaces: Optional[Mapping[str, bool]] = None) -> list[Check]:
    """interfaces: name -> has an IP address (default: this machine's, read under sys_root)."""
    interfaces = machine_interfaces(sys_root) if interfaces is None else interfaces
    hcas = sorted(path.name for path in (sys_root / "class" / "infiniband").glob("*"))
    checks = []
    for variable in SOCKET_VARIABLES:
        value = environ.get(variable)
        if not value or value.startswith("^"):  # an exclusion leaves the library every other interface
            continue
        if variable == "GLOO_SOCKET_IFNAME" and len(value) == 1:
            checks.append(Check(f"net.{variable}", "WARN", f"{variable}={value}: one character, which torch ignores"))
            continue
        problem = interface_problem(variable, value, interfaces)
        checks.append(Check(f"net.{variable}", "FAIL" if problem else "PASS",
                            problem or f"{variable}={value} names an interface of this node"))
    for variable in HCA_VARIABLES:
        value = environ.get(variable)
        if not value:
            continue
        names = [entry.split(":")[0] for entry in value.lstrip("^=").split(",") if entry]
        missing = [name for name in names if not any(h.startswith(name) for h in hcas)]
        checks.append(Check(f"net.{variable}", "FAIL" if missing else "PASS",
                            f"{variable}={value}: no RDMA device {', '.join(missing)} (this node has "
                            f"{', '.join(hcas) or 'none'})" if missing else f"{variable}={value} names existing HCAs"))
    wants_ib = bool(environ.get("NCCL_IB_HCA")) or environ.get("NCCL_NET", "").upper() == "IB"
    if wants_ib and not hcas:
        checks.append(Check("net.rdma", "FAIL", "InfiniBand is expected (NCCL_IB_HCA / NCCL_NET=IB) but /sys/class/infiniband is empty"))
    elif hcas:
        checks.append(Check("net.rdma", "PASS", f"RDMA devices: {', '.join(hcas)}"))
    master = environ.get("MASTER_ADDR")
    if master:
        try:
            address = socket.getaddrinfo(master, None)[0][4][0]
            checks.append(Check("net.master_addr", "PASS", f"MASTER_ADDR={master} resolves to {address}"))
        except OSError as error:
            checks.append(Check("net.master_addr", "FAIL", f"MASTER_ADDR={master} does not resolve here ({error})"))
    return checks
