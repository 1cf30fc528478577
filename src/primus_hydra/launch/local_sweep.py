"""`hydra/launcher=primus_local`: the points of a multirun side by side, as many at a time as the resource plan allows.

Order of events: compose and validate every point (a bad one stops the sweep before anything runs, exit 2) ->
the resource plan (orchestrator/plan.py) -> optionally the probe (launch/sweep_probe.py) -> each point in its own
non-daemon process (fork server or spawn), pinned to its slot (launch/sweep_point.py) -> one line per start and end -> the
summary (launch/sweep_summary.py) on stderr and as summary.json/summary.md next to resources.json in the sweep dir.
A failing point does not stop the others; the sweep then exits 1 after the summary. Ctrl-C/SIGTERM stops every
running point (SIGTERM to its process group, SIGKILL after the grace period) and exits 130/143.
"""
from __future__ import annotations

import collections
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from primus_hydra.errors import PrimusError
from primus_hydra.launch.sweep_point import (
    OMP_THREAD_VARIABLES,
    PointLaunch,
    PointPayload,
    read_result,
    run_point,
    task_function_for_child,
)
from primus_hydra.launch.sweep_summary import PointOutcome, end_line, final_loss_of, format_table, start_line, write_summary

POLL_S = 0.2
STATE_DIR = ".primus_local"  # result files of the points, inside the sweep dir
INDUCTOR_VARIABLES = ("TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_CACHE_DIR")  # recorded in the point's log
# imported once by the fork server (a module that fails to import is skipped): what every training point loads
_REPORTED: dict = {}  # sweep dir -> {job: PointOutcome} of the batches this process launched
FORKSERVER_PRELOAD = ("primus_hydra.launch.sweep_point", "hydra.core.utils", "cloudpickle", "torch")


class SweepPointsFailed(PrimusError):
    """Raised (through Hydra's sweeper) by the return value of every failed point: one line, exit code 1."""

    exit_code = 1


class SweepPointReturn(JobReturn):
    """A JobReturn whose failure re-raises without Hydra's extra 'Error executing job' line (errors are one line)."""

    @property
    def return_value(self) -> Any:
        if self.status == JobStatus.COMPLETED:
            return self._return_value
        raise self._return_value

    @return_value.setter
    def return_value(self, value: Any) -> None:
        self._return_value = value


@dataclass
class SweepPoint:
    job: int
    overrides: list  # the point's task overrides (all of them)
    shown: list  # the overrides that differ between points (what the progress lines and the summary show)
    config: DictConfig  # composed for this point, hydra node included
    run_dir: Path


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class LocalSweep:
    def __init__(self, hydra_context, task_function: Callable, config: DictConfig, *, stop_grace_s: float = 15.0,
                 start_method: str = "forkserver", pin_cpus: bool = True):
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config
        self.stop_grace_s = stop_grace_s
        self.start_method = start_method
        self.pin_cpus = pin_cpus
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        self.extra_env: dict = {}  # for every point (the shared Inductor cache)
        self._stop_signal: Optional[int] = None
        self._running: dict = {}  # sentinel -> _Running

    # ---- the sweep -------------------------------------------------------------------------------------------
    def run(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        from primus_hydra.launch.sweep_probe import compile_environment, run_probe
        from primus_hydra.orchestrator.plan import build_resource_plan, write_resources_json

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        points = self.compose_points(job_overrides, initial_job_idx)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        (self.sweep_dir / STATE_DIR).mkdir(exist_ok=True)
        plan = build_resource_plan(points[0].config, sweep_points=len(points))
        self.extra_env = compile_environment(points[0].config, self.sweep_dir)
        probe = bool(points[0].config.sweep.probe)
        with _forward_stop_signals(self):
            if probe:
                plan = run_probe(self, points[0], plan)
            write_resources_json(plan, self.sweep_dir)
            parallel = max(1, min(plan.parallel_jobs, len(plan.slots) or 1, len(points)))
            if not probe:  # the probe printed the plan before and after
                say(plan.format_table())
            say(f"primus_local: {len(points)} point(s), {parallel} at a time, in {self.sweep_dir}")
            outcomes = self.run_points(points, plan, parallel)
        return self.job_returns(points, outcomes)

    def compose_points(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        """Every point composed and validated (the cross-field rules, then the backend adapter's) before any
        starts: the first mistake costs nothing."""
        from primus_hydra.config.error_format import format_compose_error, is_compose_error
        from primus_hydra.config.validate import configured_world_size, validate_config
        from primus_hydra.errors import ConfigValidationError
        from primus_hydra.launch.elastic import check_backend_layout

        points, failures = [], []
        for offset, overrides in enumerate(job_overrides):
            job = initial_job_idx + offset
            label = f"[job {job}: {' '.join(filter_overrides(overrides))}]"
            try:
                config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(config):
                    config.hydra.job.id = job
                    config.hydra.job.num = job
                validate_config(config)
                run_dir = self.run_dir_of(config)
                check_backend_layout(config, run_dir, configured_world_size(config))  # the adapter's own rules
            except ConfigValidationError as error:
                failures.extend(f"error: {label} {line}" for line in error.failures)
                continue
            except PrimusError as error:
                failures.append(f"error: {label} {error}")
                continue
            except Exception as error:  # noqa: BLE001 - composition errors become one line; anything else is a bug
                if not is_compose_error(error):
                    raise
                failures.append(f"error: {label} {format_compose_error(error)}")
                continue
            points.append(SweepPoint(job, list(filter_overrides(overrides)), [], config, run_dir))
        if failures:
            for line in failures:
                say(line)
            raise SystemExit(2)
        swept = self.swept_keys()
        for point in points:
            point.shown = [override for override in point.overrides if _override_key(override) in swept] or point.overrides
        return points

    def swept_keys(self) -> set:
        """The keys the command line sweeps (`module.lr=1e-3,3e-4`): what tells the points apart."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        overrides = OverridesParser.create().parse_overrides(list(self.config.hydra.overrides.task))
        return {override.key_or_group for override in overrides if override.is_sweep_override()}

    @staticmethod
    def run_dir_of(config: DictConfig) -> Path:
        """sweep dir / subdir, resolved the way run_job resolves it (the hydra resolver reads HydraConfig)."""
        hydra_config = HydraConfig.instance()
        previous = hydra_config.cfg
        hydra_config.set_config(config)
        try:
            return Path(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir)).absolute()
        finally:
            hydra_config.cfg = previous

    def run_points(self, points: list, plan, parallel: int) -> list:
        pending = collections.deque(points)
        outcomes = {point.job: _new_outcome(point) for point in points}
        free_slots = list(range(parallel))
        done = 0
        while pending or self._running:
            if self._stop_signal is not None:
                self.stop_running()
                break
            while pending and free_slots:
                point = pending.popleft()
                slot_index = free_slots.pop(0)
                self.start(point, outcomes[point.job], plan.slots[slot_index], plan, slot_index)
            for running in self.wait_for_ended():
                free_slots.append(running.slot_index)
                free_slots.sort()
                done += 1
                say(end_line(running.outcome, done, len(points)))
        ordered = [outcomes[point.job] for point in points]
        self.report(ordered, plan)
        if self._stop_signal is not None:
            raise SystemExit(128 + self._stop_signal)
        return ordered

    def report(self, outcomes: list, plan) -> None:
        """The summary of every point this process launched into the sweep dir: Hydra may launch a sweep in
        batches (hydra.sweeper.max_batch_size), one LocalSweep each."""
        reported = _REPORTED.setdefault(str(self.sweep_dir), {})
        reported.update({outcome.job: outcome for outcome in outcomes})
        everything = [reported[job] for job in sorted(reported)]
        say(format_table(everything))
        write_summary(self.sweep_dir, everything, {"sweep_dir": str(self.sweep_dir), "parallel_jobs": plan.parallel_jobs})
        say(f"summary: {self.sweep_dir / 'summary.md'}")

    # ---- one point's process ---------------------------------------------------------------------------------
    def start(self, point: SweepPoint, outcome: PointOutcome, slot, plan, slot_index: int,
              extra_env: Optional[dict] = None) -> None:
        import cloudpickle

        env, unset, cpu_ids, outcome.pinning = slot_environment(slot, plan, pin_cpus=self.pin_cpus)
        env.update({name: value for name, value in self.extra_env.items() if name not in os.environ})
        env.update(extra_env or {})
        payload = PointPayload(self.hydra_context, task_function_for_child(self.task_function), point.config,
                               Singleton.get_state())
        result_path = self.sweep_dir / STATE_DIR / f"job{point.job}_{point.run_dir.name}.result"
        result_path.unlink(missing_ok=True)
        inductor = [f"{name}={env[name]}" for name in INDUCTOR_VARIABLES if name in env]
        launch = PointLaunch(cloudpickle.dumps(payload), env, unset, cpu_ids, ", ".join([outcome.pinning, *inductor]),
                             str(point.run_dir / "point.log"), str(result_path))
        process = self.start_context().Process(target=run_point, args=(launch,), name=f"job{point.job}")
        outcome.started = time.time()
        process.start()
        outcome.pid = process.pid
        self._running[process.sentinel] = _Running(process, point, outcome, slot_index, result_path)
        say(start_line(outcome))

    def start_context(self):
        """forkserver (default): points fork from a server that imported torch once, instead of each paying the
        import; it never initialises CUDA/HIP, so forking it is safe. spawn: a fresh interpreter per point."""
        context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            context.set_forkserver_preload(list(FORKSERVER_PRELOAD))
        return context

    def wait_for_ended(self) -> list:
        ready = multiprocessing.connection.wait(list(self._running), timeout=POLL_S)
        ended = []
        for sentinel in ready:
            running = self._running.pop(sentinel)
            running.process.join()
            running.outcome.ended = time.time()
            _record_result(running)
            ended.append(running)
        return ended

    def stop_running(self) -> None:
        """SIGTERM each running point's process group (by PID), SIGKILL what is left after the grace period;
        those points read `interrupted` (whatever their processes made of the signal)."""
        stopped = [running.outcome for running in self._running.values()]
        say(f"stopping {len(stopped)} running point(s) after {signal.Signals(self._stop_signal).name}")
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

    # ---- what Hydra gets back --------------------------------------------------------------------------------
    def job_returns(self, points: list, outcomes: list) -> list:
        failed = [outcome for outcome in outcomes if outcome.status != "ok"]
        failure = None
        if failed:
            names = ", ".join(f"{outcome.label}: {outcome.status}" for outcome in failed)
            failure = SweepPointsFailed(f"{len(failed)} of {len(outcomes)} sweep point(s) failed ({names}); "
                                        f"summary in {self.sweep_dir / 'summary.md'}")
        returns = []
        for point, outcome in zip(points, outcomes):
            hydra_cfg = OmegaConf.create({"hydra": OmegaConf.to_container(point.config.hydra)})
            with read_write(hydra_cfg), open_dict(hydra_cfg):
                hydra_cfg.hydra.runtime.output_dir = str(point.run_dir)
            task_cfg = OmegaConf.masked_copy(point.config, [key for key in point.config if key != "hydra"])
            ok = outcome.status == "ok"
            returns.append(SweepPointReturn(
                overrides=point.overrides, cfg=task_cfg, hydra_cfg=hydra_cfg, working_dir=os.getcwd(),
                task_name=str(point.config.hydra.job.name),
                status=JobStatus.COMPLETED if ok else JobStatus.FAILED,
                _return_value=outcome.return_value if ok else failure))
        return returns


@dataclass
class _Running:
    process: Any
    point: SweepPoint
    outcome: PointOutcome
    slot_index: int
    result_path: Path


def _new_outcome(point: SweepPoint) -> PointOutcome:
    return PointOutcome(job=point.job, overrides=point.shown, run_dir=str(point.run_dir))


def _record_result(running: _Running) -> None:
    outcome, exit_code = running.outcome, running.process.exitcode
    result = read_result(running.result_path)
    outcome.exit_code = exit_code
    if result is not None:
        outcome.status = result.status
        outcome.error = result.error
        outcome.final_loss = final_loss_of(result.return_value)
        outcome.peak_host_gib, outcome.peak_device_gib = result.peak_host_gib, result.peak_device_gib
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


class _forward_stop_signals:
    """While points run, SIGINT/SIGTERM only mark the sweep as stopping; the loop then stops the points."""

    def __init__(self, sweep: LocalSweep):
        self.sweep = sweep
        self.previous: dict = {}

    def __enter__(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, _frame) -> None:
        if self.sweep._stop_signal is None:
            self.sweep._stop_signal = signum

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def slot_environment(slot, plan, *, pin_cpus: bool = True) -> tuple:
    """(env to set, variables to unset, cpu ids to pin, the pinning as one line) for a point on this slot.

    Thread counts and the plan's worker environment apply only where the user has not set the variable."""
    env: dict = {}
    for name in OMP_THREAD_VARIABLES:
        if name not in os.environ:
            env[name] = str(slot.threads)
    for name, value in (plan.worker_env or {}).items():
        if name not in os.environ:
            env.setdefault(name, str(value))
    unset: tuple = ()
    parts = []
    if slot.gpu_ids:
        mask_variable = gpu_mask_variable(plan)
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


def gpu_mask_variable(plan) -> str:
    """CUDA_VISIBLE_DEVICES on NVIDIA, HIP_VISIBLE_DEVICES on AMD (where the resource detection put the ids)."""
    return plan.resources.mask_variable or "CUDA_VISIBLE_DEVICES"


def _format_ids(ids: tuple) -> str:
    ranges, start = [], None
    for i, value in enumerate(ids):
        if start is None:
            start = value
        if i + 1 == len(ids) or ids[i + 1] != value + 1:
            ranges.append(str(start) if start == value else f"{start}-{value}")
            start = None
    return ",".join(ranges)


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")
