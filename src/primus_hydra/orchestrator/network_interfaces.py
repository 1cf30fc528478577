"""The socket-interface variables of the communication libraries against this machine's interfaces, each read the way
its library reads it (no torch). A name that matches nothing ends every rank of a job in a traceback when its
process group starts; prepare() refuses it in one line instead, and task=preflight reports it on every node.

- GLOO_SOCKET_IFNAME (gloo: the CPU's process group, and torch's object collectives): a comma list of exact names,
  each needing an IP address; torch reads it only when it is longer than one character.
- NCCL_SOCKET_IFNAME (NCCL and RCCL): a comma list of name prefixes, `=` for exact names, `^` to exclude; NCCL
  uses every interface that matches, so it fails when none does.
- TP_SOCKET_IFNAME (TensorPipe, torch.distributed.rpc): one exact name.
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct
from pathlib import Path
from typing import Mapping, Optional

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def interface_names(sys_root: Path = Path("/sys")) -> list[str]:
    return sorted(path.name for path in (sys_root / "class" / "net").glob("*"))


def has_ip_address(name: str, proc_root: Path = Path("/proc")) -> bool:
    """An IPv4 address (ioctl) or an IPv6 one (/proc/net/if_inet6) on interface `name`."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        return True
    except OSError:
        pass
    try:
        return any(line.split()[-1] == name for line in (proc_root / "net" / "if_inet6").read_text().splitlines())
    except (OSError, IndexError):
        return False


def interface_problem(variable: str, value: str, interfaces: Mapping[str, bool]) -> Optional[str]:
    """What is wrong with `variable=value` on a machine whose interfaces are `interfaces` (name: has an IP address),
    read as its library reads it; None when the library will find its interface."""
    if variable == "NCCL_SOCKET_IFNAME":
        if value.startswith("^"):
            return None
        exact = value.startswith("=")
        prefixes = [name for name in value.lstrip("=").split(",") if name]
        if any(name == prefix if exact else name.startswith(prefix) for prefix in prefixes for name in interfaces):
            return None
        kind = "named" if exact else "whose name starts with"
        return (f"{variable}={value}: no network interface {kind} {' or '.join(prefixes)} on this machine "
                f"(it has {_listed(interfaces)}); name one of them or unset it")
    if variable == "GLOO_SOCKET_IFNAME" and len(value) <= 1:
        return None  # torch ignores it
    names = [name for name in value.split(",") if name] if variable == "GLOO_SOCKET_IFNAME" else [value]
    addressed = {name: True for name, address in interfaces.items() if address}
    missing = [name for name in names if name not in interfaces]
    if missing:
        return (f"{variable}={value}: no network interface {', '.join(missing)} on this machine (interfaces with "
                f"an IP address: {_listed(addressed)}); name one of them or unset it")
    unaddressed = [name for name in names if not interfaces[name]]
    if unaddressed:
        return (f"{variable}={value}: interface {', '.join(unaddressed)} has no IP address to bind (interfaces "
                f"with one: {_listed(addressed)}); name one of them or unset it")
    return None


def _listed(interfaces: Mapping[str, bool]) -> str:
    return ", ".join(sorted(interfaces)) or "none"


def machine_interfaces(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")) -> dict[str, bool]:
    return {name: has_ip_address(name, proc_root) for name in interface_names(sys_root)}


def socket_interface_failures(environ: Mapping[str, str] = os.environ, *, on_gpu: bool,
                              interfaces: Optional[Mapping[str, bool]] = None) -> list[str]:
    """One line per socket-interface variable a job of several processes on this machine would fail on: gloo's
    always, NCCL's when it runs on GPUs (TensorPipe's is not used by a job)."""
    variables = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if on_gpu else ("GLOO_SOCKET_IFNAME",)
    present = [(variable, environ[variable]) for variable in variables if environ.get(variable)]
    if not present:
        return []
    interfaces = machine_interfaces() if interfaces is None else interfaces
    problems = [interface_problem(variable, value, interfaces) for variable, value in present]
    return [problem for problem in problems if problem]
