"""`hydra/launcher=primus_local`: the points of a multirun side by side, as many at a time as the resource plan allows.

Order of events: compose and prepare every point (orchestrator/prepare.py: a bad one stops the sweep before
anything runs, exit 2) -> the sweep's resource plan (the first point's, for the sweep's number of points) ->
optionally the probe (launch/sweep/probe.py) -> each point in its own process, pinned to its slot
(launch/sweep/processes.py) -> one line per start and end -> the summary (launch/sweep/summary.py) on stderr and
as summary.json/summary.md next to resources.json in the sweep dir. A failing point does not stop the others;
the sweep then exits 1 after the summary. Ctrl-C/SIGTERM stops every running point and exits 130/143.

Another Hydra app's task (one without `prepare_job`) runs the same way, one process per point, on slots sized
by the generic per-job estimate.
"""
from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from primus_hydra.config.error_format import stop_with, user_error_lines
from primus_hydra.config.paths import hydra_job_dir
from primus_hydra.config.targets import task_class_of
from primus_hydra.errors import PrimusError, SweepPointFailed, SweepPointsFailed
from primus_hydra.launch.sweep.basic import save_sweep_record
from primus_hydra.launch.sweep.compose import SweepComposer
from primus_hydra.launch.sweep.labels import fixed_overrides, point_label, shown, varying_overrides
from primus_hydra.launch.sweep.probe import (
    PROBE_SUBDIR,
    compile_environment,
    measure,
    probe_overrides,
    tightened,
)
from primus_hydra.launch.sweep.processes import PointProcesses, SweepPoint, forward_stop_signals
from primus_hydra.launch.sweep.summary import PointOutcome, end_line, format_table, say, write_summary
from primus_hydra.orchestrator.apply import new_plan_table
from primus_hydra.orchestrator.plan import plan_for_generic_points, write_resources_json
from primus_hydra.orchestrator.prepare import replan, show_warnings

STATE_DIR = ".primus_local"  # result files of the points, inside the sweep dir
_NOT_PROBED = object()


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
class SweepMemory:
    """What the batches of one sweep share (Hydra may launch a sweep in batches: hydra.sweeper.max_batch_size).
    The launcher holds it: it lives as long as the sweep."""

    outcomes: dict = field(default_factory=dict)  # job -> PointOutcome of every batch so far
    probe: Any = _NOT_PROBED  # the probe's measurement (None: nothing usable), once the first batch probed


class LocalSweep:
    def __init__(self, hydra_context, task_function: Callable, config: DictConfig, memory: SweepMemory, *,
                 stop_grace_s: float = 15.0, start_method: str = "forkserver", pin_cpus: bool = True):
        self.hydra_context = hydra_context
        self.config = config
        self.memory = memory
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        self.composer = SweepComposer(hydra_context.config_loader, config)
        self.processes = PointProcesses(hydra_context, task_function, self.sweep_dir / STATE_DIR,
                                        start_method=start_method, pin_cpus=pin_cpus, stop_grace_s=stop_grace_s)

    # ---- the sweep -------------------------------------------------------------------------------------------
    def run(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        points = self.compose_points(job_overrides, initial_job_idx)
        plan = self.prepare_points(points)
        if _runs_points_here(points[0]):
            return self.run_here(points)
        save_sweep_record(self.config)
        (self.sweep_dir / STATE_DIR).mkdir(exist_ok=True)
        first = points[0].prepared
        self.processes.extra_env = compile_environment(first.cfg, self.sweep_dir) if first is not None else {}
        probe = first is not None and bool(first.cfg.sweep.probe)
        with forward_stop_signals(self.processes):
            if probe:
                plan = self.probe(points, plan)
            write_resources_json(plan, self.sweep_dir)
            parallel = max(1, min(plan.parallel_jobs, len(plan.slots) or 1, len(points)))
            table = new_plan_table(plan)
            if table and not probe:  # the probe printed the plan before and after
                say(table)
            say(f"primus_local: {len(points)} point(s), {parallel} at a time, in {self.sweep_dir}")
            outcomes = self.run_points(points, plan, parallel)
        return self.job_returns(points, outcomes)

    def compose_point(self, overrides: list, job: int, subdir: Optional[str] = None) -> DictConfig:
        config = self.composer.compose(overrides)
        with read_write(config.hydra), open_dict(config):
            config.hydra.job.id = job
            config.hydra.job.num = job
            if subdir is not None:
                config.hydra.sweep.subdir = subdir
        return config

    def compose_points(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        points, failures = [], []
        fixed = fixed_overrides(self.config.hydra.overrides.task)  # what every point shares: not in its label
        for offset, overrides in enumerate(job_overrides):
            job = initial_job_idx + offset
            try:
                config = self.compose_point(list(overrides), job)
                run_dir = hydra_job_dir(config, sweep=True)
            except Exception as error:  # noqa: BLE001 - composition errors become one line; anything else is a bug
                label = point_label(job, filter_overrides(overrides), fixed)
                failures.append(f"error: {label} {' '.join(user_error_lines(error))}")
                continue
            points.append(SweepPoint(job, list(filter_overrides(overrides)), [], config, run_dir))
        _stop_on(failures)
        for point in points:
            point.shown = varying_overrides(point.overrides, fixed)
        return points

    def prepare_points(self, points: list):
        """Every point prepared by its task (the cross-field rules, the backend's, the paths it reads) before any
        starts, all with the plan of the first: the first mistake costs nothing. Returns the sweep's plan."""
        task_class = task_class_of(points[0].config)
        if task_class is None or not hasattr(task_class, "prepare_job"):
            return plan_for_generic_points(len(points))
        # points that run in their own processes share one plan (its slots); a task run here plans each point
        shared = not getattr(task_class, "runs_sweep_points_in_process", False)
        plan, failures = None, []
        for point in points:
            try:
                point.prepared = task_class.prepare_job(point.config, point.run_dir, plan=plan if shared else None,
                                                        sweep_points=len(points))
            except Exception as error:  # noqa: BLE001 - user errors become one line each; anything else is a bug
                failures += [f"error: [job {point.job}: {shown(point.shown)}] {line}" for line in user_error_lines(error)]
                continue
            plan = plan or point.prepared.plan
            show_warnings(point.prepared, label=f"[job {point.job}: {shown(point.shown)}] ")
        _stop_on(failures)
        return plan

    def run_here(self, points: list) -> list:
        """A task that only computes and prints (task=plan) runs its points in this process, one after the other:
        no run dirs, no point processes, milliseconds a point. A point whose run ends in a user error (a search
        that finds no layout) prints its line and is a failed result; the points after it still run."""
        returns = []
        for point in points:
            task = task_class_of(point.config)(point.prepared.cfg, job=point.prepared,
                                              point={"num": point.job, "overrides": point.overrides})
            try:
                returns.append(self._job_return(point, task.run(), ok=True))
            except PrimusError as error:
                label = f"[job {point.job}: {shown(point.shown)}] "
                lines = user_error_lines(error)
                say("\n".join(f"error: {label}{line}" for line in lines))
                failed = SweepPointFailed(f"{label}{' '.join(lines)}", error.exit_code)
                returns.append(self._job_return(point, failed, ok=False))
        return returns

    def probe(self, points: list, plan):
        """The first point alone for sweep.probe_steps steps: its measured peak tightens the plan, and every point's
        `auto` knobs follow. The first batch of a sweep probes; later batches reuse its measurement."""
        first = points[0]
        if self.memory.probe is _NOT_PROBED:
            self.memory.probe = self._measure_probe(first, plan)
        else:
            say("probe: measured by an earlier batch of this sweep")
        new = tightened(plan, self.memory.probe)
        for point in points:
            point.prepared = replan(point.prepared, new)
        return new

    def _measure_probe(self, point: SweepPoint, plan) -> Optional[tuple]:
        steps = int(point.prepared.cfg.sweep.probe_steps)
        overrides = probe_overrides(point, steps)
        config = self.compose_point(overrides, point.job, subdir=PROBE_SUBDIR)
        run_dir = hydra_job_dir(config, sweep=True)
        try:
            job = task_class_of(config).prepare_job(config, run_dir, plan=plan, sweep_points=1)
        except Exception as error:  # noqa: BLE001
            say(f"probe: skipped, {steps} step(s) of job {point.job} are not a valid job: {user_error_lines(error)[0]}; "
                "the plan stays as estimated")
            return None
        probe = SweepPoint(point.job, overrides, [f"probe of job {point.job}", f"module.train_iters={steps}"],
                           config, run_dir, job)
        return measure(probe, plan, self.processes)

    def run_points(self, points: list, plan, parallel: int) -> list:
        pending = collections.deque(points)
        outcomes = {point.job: PointOutcome(job=point.job, overrides=point.shown, run_dir=str(point.run_dir))
                    for point in points}
        free_slots = list(range(parallel))
        done = 0
        processes = self.processes
        while pending or processes.running:
            if processes.stop_signal is not None:
                processes.stop_all()
                break
            while pending and free_slots:
                point = pending.popleft()
                slot_index = free_slots.pop(0)
                processes.start(point, outcomes[point.job], plan.slots[slot_index], plan, slot_index)
            for slot_index, outcome in processes.wait_for_ended():
                free_slots.append(slot_index)
                free_slots.sort()
                done += 1
                say(end_line(outcome, done, len(points)))
        ordered = [outcomes[point.job] for point in points]
        self.report(ordered, plan)
        if processes.stop_signal is not None:
            raise SystemExit(128 + processes.stop_signal)
        return ordered

    def report(self, outcomes: list, plan) -> None:
        """The summary of every point of this sweep so far (every batch), in the sweep dir."""
        self.memory.outcomes.update({outcome.job: outcome for outcome in outcomes})
        everything = [self.memory.outcomes[job] for job in sorted(self.memory.outcomes)]
        say(format_table(everything))
        write_summary(self.sweep_dir, everything, {"sweep_dir": str(self.sweep_dir), "parallel_jobs": plan.parallel_jobs})
        say(f"summary: {self.sweep_dir / 'summary.md'}")

    # ---- what Hydra gets back --------------------------------------------------------------------------------
    def job_returns(self, points: list, outcomes: list) -> list:
        failed = [outcome for outcome in outcomes if outcome.status != "ok"]
        failure = None
        if failed:
            names = ", ".join(f"{outcome.label}: {outcome.status}" for outcome in failed)
            failure = SweepPointsFailed(f"{len(failed)} of {len(outcomes)} sweep point(s) failed ({names}); "
                                        f"summary in {self.sweep_dir / 'summary.md'}")
        return [self._job_return(point, outcome.return_value if outcome.status == "ok" else failure,
                                 ok=outcome.status == "ok", working_dir=outcome.working_dir)
                for point, outcome in zip(points, outcomes)]

    @staticmethod
    def _job_return(point: SweepPoint, value: Any, *, ok: bool, working_dir: Optional[str] = None) -> SweepPointReturn:
        """What Hydra's run_job returned in the point's process (its config is the point's own: nothing else uses
        it)."""
        hydra_cfg = point.config
        with read_write(hydra_cfg.hydra), open_dict(hydra_cfg.hydra):
            hydra_cfg.hydra.runtime.output_dir = str(point.run_dir)
        task_cfg = point.prepared.cfg if point.prepared is not None else OmegaConf.masked_copy(
            point.config, [key for key in point.config if key != "hydra"])
        return SweepPointReturn(overrides=point.overrides, cfg=task_cfg, hydra_cfg=hydra_cfg,
                                working_dir=working_dir or os.getcwd(),
                                task_name=str(point.config.hydra.job.name),
                                status=JobStatus.COMPLETED if ok else JobStatus.FAILED, _return_value=value)


def _runs_points_here(point: SweepPoint) -> bool:
    task_class = task_class_of(point.config)
    return point.prepared is not None and bool(getattr(task_class, "runs_sweep_points_in_process", False))


def _stop_on(failures: list) -> None:
    if failures:
        stop_with(failures, 2)
