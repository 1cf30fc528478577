"""Deterministic fault injection for tests of failure handling (a crashed rank, a rank killed mid-save).

PRIMUS_FAULT="<kind>:<rank>:<step>". Kinds: `none` (no fault: one value of a sweep over faults), `raise` (an error after that step), `hang` (a stuck rank after that
step), and the SIGKILLs of KILL_POINTS: `kill` after the step, and the instants of that step's checkpoint save:
`kill_during_save` (the rank's shards written, before meta.json), then, on rank 0 which finishes the save,
`kill_before_rename` (meta.json written, the folder still `.tmp-step_N`), `kill_after_rename` (`step_N` complete,
`latest` not yet updated), `kill_before_latest` (the new pointer written beside `latest`, not yet replacing it) and
`kill_after_latest`. A fault fires only in the first attempt of a job (TORCHELASTIC_RESTART_COUNT and Slurm's
SLURM_RESTART_COUNT unset or 0), so that a restarted or requeued job can show recovery.
"""
from __future__ import annotations

import os
import signal
import time

FAULT_ENV = "PRIMUS_FAULT"

# kind -> the point (inject_fault's first argument) where it SIGKILLs the rank
KILL_POINTS = {
    "kill": "step",
    "kill_during_save": "save",
    "kill_before_rename": "before_rename",
    "kill_after_rename": "after_rename",
    "kill_before_latest": "before_latest",
    "kill_after_latest": "after_latest",
}
KINDS = ("none", "raise", "hang", *KILL_POINTS)


class InjectedFault(RuntimeError):
    pass


def inject_fault(point: str, rank: int, step: int) -> None:
    """point: "step" (after a training step), or one of the save's points (checkpoint.py, CheckpointManager.save)."""
    spec = os.environ.get(FAULT_ENV)
    restarts = (int(os.environ.get(name, "0") or 0) for name in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"))
    if not spec or any(count > 0 for count in restarts):
        return
    kind, fault_rank, fault_step = spec.split(":")
    if kind not in KINDS:
        raise ValueError(f"{FAULT_ENV}={spec}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if int(fault_rank) != rank or int(fault_step) != step:
        return
    if point == "step" and kind == "raise":
        raise InjectedFault(f"injected fault on rank {rank} at step {step}")
    if KILL_POINTS.get(kind) == point:
        os.kill(os.getpid(), signal.SIGKILL)
    if point == "step" and kind == "hang":  # a stuck rank: its peers must time out in their next collective
        while True:
            time.sleep(60)
