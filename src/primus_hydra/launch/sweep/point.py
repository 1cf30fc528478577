"""One sweep point in its own process: pinned, logged to its run dir, running Hydra's own `run_job`.

The parent (launch/sweep/local.py) composes and prepares every point, then starts this module's `run_point` in a
process that is not a daemon (forked from a fork server that imported torch once, or spawned), so the point can
start its own elastic workers. The point runs exactly what Hydra's basic launcher runs (run dir = sweep
dir/subdir, .hydra files, callbacks, the task function), hands its task the job the parent prepared, and leaves
a small result file that the parent reads back: status, return value, first error line, peaks.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pickle
import resource
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

from primus_hydra.errors import SweepPointFailed
from primus_hydra.orchestrator.prepare import HANDOFF
from primus_hydra.util.process_exit import exit_without_teardown


@dataclasses.dataclass
class PointLaunch:
    """Everything a point's process needs; pickled once when the point's process starts
    (forkserver or spawn)."""

    payload: bytes  # cloudpickle of PointPayload (Hydra objects, resolvers and closures need cloudpickle)
    env: dict  # set in the point's process before anything imports torch
    env_unset: tuple  # removed from the point's environment (the other vendor's visible-devices variable)
    cpu_ids: Optional[tuple]  # sched_setaffinity of the point (its workers inherit it); None: not pinned
    pinning: str  # the line recorded at the top of the point's log
    log_path: str  # the point's stdout and stderr
    result_path: str


@dataclasses.dataclass
class PointPayload:
    hydra_context: Any
    task_function: Any  # a TaskFunctionRef or the function itself
    config: Any  # the composed sweep config of this point
    singleton_state: Any  # Hydra's singletons (JobRuntime, ConfigStore, resolvers) as the parent has them
    prepared: Any  # the PreparedJob the parent made for this point's task (None: another Hydra app's task)
    run_dir: str  # where run_job puts the point: the key under which its task finds the prepared job


@dataclasses.dataclass(frozen=True)
class TaskFunctionRef:
    """The task function by module and qualified name: a @hydra.main-wrapped function is not picklable (hydra#2361)."""

    module: str
    qualname: str

    def resolve(self) -> Callable:
        target: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            target = getattr(target, part)
        return getattr(target, "__wrapped__", target)  # @hydra.main keeps the task function as __wrapped__


def task_function_for_child(task_function: Callable) -> Any:
    """A reference when the function can be found again by name, else the function (cloudpickled by value).
    A script's own task function lives in __main__, which a point's process does not have: by value."""
    ref = TaskFunctionRef(getattr(task_function, "__module__", ""), getattr(task_function, "__qualname__", ""))
    if ref.module == "__main__":
        return task_function
    try:
        if ref.resolve() is task_function:
            return ref
    except (ImportError, AttributeError):
        pass
    return task_function


@dataclasses.dataclass
class PointResult:
    status: str  # ok | failed
    return_value: Any = None
    error: str = ""  # first line of the error
    exit_code: int = 0
    peak_host_gib: Optional[float] = None  # max RSS of one of the point's processes
    peak_device_gib: Optional[float] = None  # CUDA/HIP max reserved of one rank (None: not measured)
    working_dir: Optional[str] = None  # run_job's (the run dir when hydra.job.chdir=true, else the cwd)


def run_point(launch: PointLaunch) -> None:
    """The point process's entry (multiprocessing target); exits with 0 when the job completed."""
    _leave_parent_process_group()
    _redirect_output(launch.log_path)
    print(f"[primus_local] {launch.pinning}", flush=True)
    try:
        _pin(launch)
        result = _run_job(launch)
    except Exception as error:  # noqa: BLE001 - whatever fails here is this point's failure, reported as one line
        traceback.print_exc()
        result = PointResult("failed", error=first_line(error), exit_code=1)
    _write_result(result, launch.result_path)
    exit_without_teardown(result.exit_code)  # no interpreter teardown: torch's atexit hooks can take seconds


def _leave_parent_process_group() -> None:
    """Own process group, so the parent stops a point and its workers with one killpg; die with the parent."""
    os.setpgrp()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _pin(launch: PointLaunch) -> None:
    for name in launch.env_unset:
        os.environ.pop(name, None)
    os.environ.update(launch.env)
    if launch.cpu_ids:
        os.sched_setaffinity(0, launch.cpu_ids)
    _resize_preloaded_thread_pools()


def _resize_preloaded_thread_pools() -> None:
    """A fork server that preloaded torch sized torch's intra-op pool for the whole machine; this point has its
    share (OMP_NUM_THREADS, now set), and more threads than pinned cores would make every step crawl."""
    torch = sys.modules.get("torch")
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def _redirect_output(log_path: str) -> None:
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _run_job(launch: PointLaunch) -> PointResult:
    import cloudpickle
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobStatus, run_job

    payload: PointPayload = cloudpickle.loads(launch.payload)
    Singleton.set_state(payload.singleton_state)
    if payload.prepared is not None:
        HANDOFF.give(Path(payload.run_dir), payload.prepared)
    task_function = payload.task_function
    if isinstance(task_function, TaskFunctionRef):
        task_function = task_function.resolve()
    try:
        job_return = run_job(
            hydra_context=payload.hydra_context,
            task_function=task_function,
            config=payload.config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
    except SystemExit as exit_:  # the CLI's task function reports a PrimusError as one line, then exits
        code = exit_.code if isinstance(exit_.code, int) or exit_.code is None else 1
        if not code:
            return PointResult("ok")
        result = PointResult("failed", error=_last_error_line(launch.log_path), exit_code=code)
    except Exception as error:  # noqa: BLE001 - anything Hydra itself raised while setting the job up
        traceback.print_exc()
        result = PointResult("failed", error=first_line(error), exit_code=1)
    else:
        if job_return.status == JobStatus.COMPLETED:
            result = PointResult("ok", return_value=job_return._return_value)
        elif isinstance(job_return._return_value, SweepPointFailed):  # its one line is in the point's log already
            failed = job_return._return_value
            result = PointResult("failed", error=_last_error_line(launch.log_path), exit_code=failed.exit_code)
        else:
            error = job_return._return_value
            traceback.print_exception(type(error), error, error.__traceback__)
            result = PointResult("failed", error=first_line(error), exit_code=1)
        result.working_dir = job_return.working_dir
    if payload.prepared is not None and _job_left_behind(Path(payload.run_dir)):
        print(f"[primus_local] warning: the task did not take the job prepared for {payload.run_dir}", flush=True)
    result.peak_host_gib, result.peak_device_gib = _measured_peaks()
    return result


def _job_left_behind(run_dir: Path) -> bool:
    """A prepared job still waiting: the point's task did not take it (it prepared another one itself)."""
    return HANDOFF.take(run_dir) is not None


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _last_error_line(log_path: str) -> str:
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return "exited"
    errors = [line[len("error: "):] for line in lines if line.startswith("error: ")]
    if not errors:
        return "exited"
    last = errors[-1]
    if last.startswith("[job ") and "] " in last:  # the CLI's sweep label: the summary names the point already
        last = last.split("] ", 1)[1]
    return last


def _measured_peaks() -> tuple:
    """Host: max RSS of one process (this one, or its largest elastic worker: RUSAGE_CHILDREN keeps the largest).
    Device: CUDA/HIP max reserved of one rank, when this process trained on its GPUs itself (one process per job)."""
    own_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    worker_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    host_gib = max(own_kib, worker_kib) / 2**20
    device_gib = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        device_gib = max(torch.cuda.max_memory_reserved(i) for i in range(torch.cuda.device_count())) / 2**30
    return round(host_gib, 4), (round(device_gib, 4) if device_gib is not None else None)


def _write_result(result: PointResult, path: str) -> None:
    try:
        data = pickle.dumps(result)
    except Exception:  # noqa: BLE001 - a return value that does not pickle travels as its repr
        result.return_value = repr(result.return_value)
        data = pickle.dumps(result)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def read_result(path: Path) -> Optional[PointResult]:
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError):
        return None
