"""The processes of a local sweep's points: start one on its slot, wait for those that end, stop them all.

Each point runs in its own non-daemon process (fork server or spawn; launch/sweep/point.py is its side), pinned to
its slot's CPUs and given its slot's GPUs through the vendor's visible-devices variable. Ctrl-C/SIGTERM while points
run only marks the sweep as stopping; the sweep's loop then stops the points (SIGTERM to each point's process group,
SIGKILL after the grace period).
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from hydra.core.singleton import Singleton

from primus_hydra.launch.sweep.point import (
    PointLaunch,
    PointPayload,
    read_result,
    run_point,
    task_function_for_child,
)
from primus_hydra.launch.sweep.summary import PointOutcome, objective_of, say, start_line
from primus_hydra.orchestrator.plan import THREAD_VARIABLES

POLL_S = 0.2
INDUCTOR_VARIABLES = ("TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_CACHE_DIR")  # recorded in the point's log
# imported once by the fork server (a module that fails to import is skipped): what every training point loads
FORKSERVER_PRELOAD = ("primus_hydra.launch.sweep.point", "hydra.core.utils", "cloudpickle", "torch")


@dataclass
class SweepPoint:
    job: int  # hydra.job.num
    overrides: list  # the point's task overrides (all of them)
    shown: list  # the overrides that differ between points (what the progress lines and the summary show)
    config: Any  # composed for this point, hydra node included
    run_dir: Path
    prepared: Any = None  # the PreparedJob of a primus-hydra task; None for another Hydra app's task


@dataclass
class _Running:
    process: Any
    point: SweepPoint
    outcome: PointOutcome
    slot_index: int
    result_path: Path


@dataclass
class PointProcesses:
    """The running points of one sweep (and the settings they start with)."""

    hydra_context: Any
    task_function: Callable
    state_dir: Path  # result files of the points
    start_method: str = "forkserver"
    pin_cpus: bool = True
    stop_grace_s: float = 15.0
    extra_env: dict = field(default_factory=dict)  # for every point (the shared Inductor cache)
    stop_signal: Optional[int] = None  # set by the signal handler: the sweep is stopping
    _running: dict = field(default_factory=dict)  # sentinel -> _Running

    @property
    def running(self) -> int:
        return len(self._running)

    def start(self, point: SweepPoint, outcome: PointOutcome, slot, plan, slot_index: int,
              extra_env: Optional[dict] = None) -> None:
        import cloudpickle

        env, unset, cpu_ids, outcome.pinning = slot_environment(slot, plan, pin_cpus=self.pin_cpus)
        env.update({name: value for name, value in self.extra_env.items() if name not in os.environ})
        env.update(extra_env or {})
        payload = PointPayload(self.hydra_context, task_function_for_child(self.task_function), point.config,
                               Singleton.get_state(), point.prepared, str(point.run_dir))
        result_path = self.state_dir / f"job{point.job}_{point.run_dir.name}.result"
        result_path.unlink(missing_ok=True)
        inductor = [f"{name}={env[name]}" for name in INDUCTOR_VARIABLES if name in env]
        launch = PointLaunch(cloudpickle.dumps(payload), env, unset, cpu_ids, ", ".join([outcome.pinning, *inductor]),
                             str(point.run_dir / "point.log"), str(result_path))
        process = self._context().Process(target=run_point, args=(launch,), name=f"job{point.job}")
        outcome.started = time.time()
        process.start()
        outcome.pid = process.pid
        self._running[process.sentinel] = _Running(process, point, outcome, slot_index, result_path)
        say(start_line(outcome))

    def _context(self):
        """forkserver (default): points fork from a server that imported torch once, instead of each paying the
        import; it never initialises CUDA/HIP, so forking it is safe. spawn: a fresh interpreter per point."""
        context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            context.set_forkserver_preload(list(FORKSERVER_PRELOAD))
        return context

    def wait_for_ended(self) -> list[tuple[int, PointOutcome]]:
        """(slot index, outcome) of the points that ended within the poll interval."""
        ready = multiprocessing.connection.wait(list(self._running), timeout=POLL_S)
        ended = []
        for sentinel in ready:
            running = self._running.pop(sentinel)
            running.process.join()
            running.outcome.ended = time.time()
            _record_result(running)
            ended.append((running.slot_index, running.outcome))
        return ended

    def run_alone(self, point: SweepPoint, outcome: PointOutcome, slot, plan, extra_env: dict) -> PointOutcome:
        """One point on `slot`, waited for (a stop signal stops it and exits 128 + the signal)."""
        self.start(point, outcome, slot, plan, 0, extra_env=extra_env)
        while self._running:
            if self.stop_signal is not None:
                self.stop_all()
                raise SystemExit(128 + self.stop_signal)
            self.wait_for_ended()
        return outcome

    def stop_all(self) -> None:
        """SIGTERM each running point's process group (by PID), SIGKILL what is left after the grace period;
        those points read `interrupted` (whatever their processes made of the signal)."""
        stopped = [running.outcome for running in self._running.values()]
        say(f"stopping {len(stopped)} running point(s) after {signal.Signals(self.stop_signal).name}")
        for running in self._running.values():
            _signal_group(running.process.pid, signal.SIGTERM)
        deadline = time.time() + self.stop_grace_s
        while self._running and time.time() < deadline:
            self.wait_for_ended()
        for running in self._running.values():
            _signal_group(running.process.pid, signal.SIGKILL)
        while self._running:
            self.wait_for_ended()
        for outcome in stopped:
            outcome.status = "interrupted"


def _record_result(running: _Running) -> None:
    outcome, exit_code = running.outcome, running.process.exitcode
    result = read_result(running.result_path)
    outcome.exit_code = exit_code
    if result is not None:
        outcome.status = result.status
        outcome.error = result.error
        outcome.objective = objective_of(result.return_value)
        outcome.peak_host_gib, outcome.peak_device_gib = result.peak_host_gib, result.peak_device_gib
        outcome.working_dir = result.working_dir
        outcome.return_value = result.return_value
    elif exit_code is not None and exit_code < 0:
        outcome.status = "killed"
        outcome.error = f"signal {signal.Signals(-exit_code).name}"
    else:
        outcome.status = "failed"
        outcome.error = f"exited with code {exit_code} before reporting a result (see {running.point.run_dir}/point.log)"


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)  # the point made itself a process group leader: its workers get it too
    except (ProcessLookupError, PermissionError):
        pass


class forward_stop_signals:
    """While points run, SIGINT/SIGTERM only mark the sweep as stopping; the loop then stops the points."""

    def __init__(self, processes: PointProcesses):
        self.processes = processes
        self.previous: dict = {}

    def __enter__(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, _frame) -> None:
        if self.processes.stop_signal is None:
            self.processes.stop_signal = signum

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def slot_environment(slot, plan, *, pin_cpus: bool = True) -> tuple:
    """(env to set, variables to unset, cpu ids to pin, the pinning as one line) for a point on this slot.

    Thread counts and the plan's worker environment apply only where the user has not set the variable."""
    env: dict = {}
    for name in THREAD_VARIABLES:
        if name not in os.environ:
            env[name] = str(slot.threads)
    for name, value in (plan.worker_env or {}).items():
        if name not in os.environ:
            env.setdefault(name, str(value))
    unset: tuple = ()
    parts = []
    if slot.gpu_ids:
        mask_variable = plan.resources.mask_variable or "CUDA_VISIBLE_DEVICES"  # where detection put the ids
        env[mask_variable] = ",".join(str(i) for i in slot.gpu_ids)
        other = "HIP_VISIBLE_DEVICES" if mask_variable == "CUDA_VISIBLE_DEVICES" else "CUDA_VISIBLE_DEVICES"
        unset = (other,)
        parts.append(f"{mask_variable}={env[mask_variable]}")
    # only CPUs this process may use (PRIMUS_AUTO_VCPUS can stand for more than there are)
    allowed = os.sched_getaffinity(0)
    cpu_ids = tuple(cpu for cpu in slot.cpu_ids if cpu in allowed) if pin_cpus else ()
    cpu_ids = cpu_ids or None
    if cpu_ids:
        parts.append(f"cpus {_format_ids(cpu_ids)}")
    threads = os.environ.get("OMP_NUM_THREADS", env.get("OMP_NUM_THREADS"))
    parts.append(f"OMP_NUM_THREADS={threads}" + (" (yours)" if "OMP_NUM_THREADS" in os.environ else ""))
    return env, unset, cpu_ids, ", ".join(parts)


def _format_ids(ids: tuple) -> str:
    ranges, start = [], None
    for i, value in enumerate(ids):
        if start is None:
            start = value
        if i + 1 == len(ids) or ids[i + 1] != value + 1:
            ranges.append(str(start) if start == value else f"{start}-{value}")
            start = None
    return ",".join(ranges)
