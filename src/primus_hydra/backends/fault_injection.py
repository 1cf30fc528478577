"""Deterministic fault injection for tests of failure handling (a crashed rank, a rank killed mid-save).

PRIMUS_FAULT="<kind>:<rank>:<step>" with kind raise | kill | hang | kill_during_save. A fault fires only in the first
attempt of a job (TORCHELASTIC_RESTART_COUNT unset or 0), so that a restarted job can show recovery.
"""
from __future__ import annotations

import os
import signal
import time

FAULT_ENV = "PRIMUS_FAULT"


class InjectedFault(RuntimeError):
    pass


def inject_fault(point: str, rank: int, step: int) -> None:
    """point: "step" (after a training step) or "save" (after this rank wrote its checkpoint shards)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0:
        return
    kind, fault_rank, fault_step = spec.split(":")
    if int(fault_rank) != rank or int(fault_step) != step:
        return
    if point == "step" and kind == "raise":
        raise InjectedFault(f"injected fault on rank {rank} at step {step}")
    if (point == "step" and kind == "kill") or (point == "save" and kind == "kill_during_save"):
        os.kill(os.getpid(), signal.SIGKILL)
    if point == "step" and kind == "hang":  # a stuck rank: its peers must time out in their next collective
        while True:
            time.sleep(60)
