"""The rendezvous port: a free one picked for single-node jobs, or the user's, checked before workers start."""
from __future__ import annotations

import socket

from primus_hydra.config.choices import is_auto
from primus_hydra.errors import PrimusError


def find_free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((addr, 0))
        return sock.getsockname()[1]


def ensure_port_free(addr: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, port))
        except OSError as error:
            raise PrimusError(
                f"launch.master_port={port} is busy on {addr} ({error.strerror}); pick another port or launch.master_port=auto"
            ) from None


def resolve_master_port(addr: str, port, nnodes: int) -> int:
    if is_auto(port):
        if nnodes > 1:
            raise PrimusError("launch.master_port=auto works on one node only; with launch.nnodes>1 give every node the same port")
        return find_free_port(addr)
    if nnodes == 1:  # this node hosts the store: its port must be free here
        ensure_port_free(addr, int(port))
    return int(port)
