"""Experiment trackers fed by the step loop (logger.use: csv, wandb, mlflow), on rank 0, off the loop's thread.

The loop hands each step's record (what metrics.jsonl gets) to `ExperimentTrackers.log`, which only puts it on a
bounded queue: a background thread starts the trackers (imports, connections: never on the loop's time), then sends
the records in batches. A tracker that fails (unreachable, refused) is dropped with one warning line and the run goes
on: metrics.jsonl stays the record. Every call into a tracker library runs on that thread, and `finish` waits for it
at most a bounded time.

One tracker run per training run: each tracker's run id and the last step it was sent are kept in
<run_dir>/.primus/tracker.json, so a resumed, restarted or requeued run continues the same tracker run, and the steps
it redoes that the tracker already has are skipped (said in one line).
"""
from __future__ import annotations

import json
import logging
import math
import queue
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from primus_hydra.backends.common.tracker_sinks import SINKS, TrackerSink
from primus_hydra.config.secrets import config_for_file, redact_text, secret_values

log = logging.getLogger("primus_hydra.train")

STATE_FILE = Path(".primus") / "tracker.json"
RESOLVED_CONFIG_ARTIFACT = "config_resolved.yaml"  # what the runtime writes (runtime/train_runtime.py, a layer up)
BATCH = 256  # records sent in one call at most
FLUSH_S = 1.0  # a record waits at most this long for others to be sent with
_DONE = object()


@dataclass
class TrackedRun:
    """What every tracker is started with."""

    run_dir: Path
    name: str
    group: Optional[str]  # the sweep a point belongs to
    params: dict[str, str]  # the composed config, flattened, secrets redacted
    tags: dict[str, str]
    sweep_params: dict[str, str] = field(default_factory=dict)  # the keys a sweep varies, this point's values
    timeout_s: float = 10.0


def flattened(node: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        out: dict[str, str] = {}
        for key, value in node.items():
            out.update(flattened(value, f"{prefix}{key}."))
        return out
    if isinstance(node, list) and any(isinstance(item, (dict, list)) for item in node):
        return {k: v for index, item in enumerate(node) for k, v in flattened(item, f"{prefix}{index}.").items()}
    return {prefix[:-1]: json.dumps(node) if isinstance(node, list) else str(node)}


def config_params(cfg: Any, secrets: set[str]) -> dict[str, str]:
    """The config as the run dir's config_resolved.yaml has it (secret-named values redacted, values read from the
    environment kept as their interpolation), flattened to dotted keys; any secret value left in a string blanked."""
    plain = config_for_file(cfg)
    plain.pop("hydra", None)
    return {key: redact_text(value, secrets) for key, value in flattened(plain).items()}


def git_commit(folder: Path) -> Optional[str]:
    try:
        result = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def sweep_point(run_dir: Path) -> tuple[Optional[str], dict[str, str]]:
    """(the sweep's folder, the keys it varies with this point's values) when run_dir is a point of a Hydra sweep
    (multirun.yaml one folder up), else (None, {})."""
    record = run_dir.parent / "multirun.yaml"
    if not record.is_file():
        return None, {}
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    group = f"{run_dir.parent.parent.name}/{run_dir.parent.name}"
    try:  # the sweep's command line as Hydra recorded it, and this point's overrides
        swept = OverridesParser.create().parse_overrides([str(line) for line in OmegaConf.load(record).hydra.overrides.task])
        point = OverridesParser.create().parse_overrides(
            [str(line) for line in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")])
    except Exception:  # noqa: BLE001 - a sweeper that keeps no record (Optuna's): grouped, no varying keys
        return group, {}
    fixed = {override.key_or_group for override in swept if not override.is_sweep_override()}
    return group, {override.key_or_group: str(override.value()) for override in point  # Hydra's escapes undone
                   if override.key_or_group not in fixed}


def tracked_run(cfg: Any, run_dir: Path) -> TrackedRun:
    secrets = secret_values(cfg)
    group, varying = sweep_point(run_dir)
    name = f"{group}/{run_dir.name}" if group else run_dir.name
    tags = {"run_dir": str(run_dir.resolve()), "host": socket.gethostname()}
    commit = git_commit(Path(__file__).parent)
    if commit:
        tags["git_commit"] = commit
    if group:
        tags["sweep"] = group
    return TrackedRun(run_dir=run_dir, name=name, group=group, params=config_params(cfg, secrets), tags=tags,
                      sweep_params={key: redact_text(value, secrets) for key, value in varying.items()},
                      timeout_s=float(cfg.logger.timeout_s))


class TrackerState:
    """<run_dir>/.primus/tracker.json: per tracker, its run's ids and the last step sent."""

    def __init__(self, run_dir: Path, resuming: bool):
        self.path = Path(run_dir) / STATE_FILE
        self.data: dict[str, dict] = {}
        if resuming:
            try:
                self.data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.data = {}

    def of(self, sink: str) -> dict:
        return self.data.setdefault(sink, {})

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        tmp.replace(self.path)


class ExperimentTrackers:
    """The trackers of logger.use (those with a sink here) behind one bounded queue and one thread."""

    def __init__(self, sinks: list[TrackerSink], make_run: Callable[[], TrackedRun], run_dir: Path, timeout_s: float,
                 resuming: bool, queue_size: int):
        """make_run: what the trackers are started with, made on the thread (flattening and redacting the config
        costs ~40 ms that the loop does not wait for)."""
        self.sinks, self.make_run, self.run_dir, self.timeout_s = sinks, make_run, Path(run_dir), timeout_s
        self.state, self.resuming = TrackerState(run_dir, resuming), resuming
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.dropped = 0
        self.skipped: dict[str, list[int]] = {}
        # started with the first record, after the first step: the trackers' imports and connections (seconds of
        # CPU) then overlap the steps that follow instead of slowing the first one
        self.thread = threading.Thread(target=self._serve, name="primus-trackers", daemon=True)

    @classmethod
    def for_job(cls, cfg: Any, run_dir: Path, resuming: bool) -> Optional["ExperimentTrackers"]:
        logger = cfg.get("logger")
        names = [str(name) for name in logger.use] if logger is not None else []
        sinks = [SINKS[name](logger) for name in names if name in SINKS]
        if not sinks:
            return None
        return cls(sinks, lambda: tracked_run(cfg, Path(run_dir)), Path(run_dir), float(logger.timeout_s), resuming,
                   int(logger.queue_size))

    # -- the loop's side: never waits ------------------------------------------------------------------
    def log(self, record: dict) -> None:
        if self.thread.ident is None:
            self.thread.start()
        try:
            self.queue.put_nowait((time.time(), dict(record)))
        except queue.Full:
            self.dropped += 1

    def finish(self, summary: dict[str, float], artifacts: list[Path], failed: bool) -> None:
        """Send what is queued, the artifacts and the summary, and end the tracker runs (failed or finished);
        waits at most a bounded time."""
        if self.thread.ident is None:  # no step was logged (a failure before the first): the runs still end failed
            self.thread.start()
        limit = self.timeout_s * (2 + len(self.sinks))
        deadline = time.monotonic() + limit
        while True:  # the thread may be slow to drain; the end marker must not be dropped
            try:
                self.queue.put((summary, artifacts, failed, _DONE), timeout=0.1)
                break
            except queue.Full:
                if time.monotonic() > deadline or not self.thread.is_alive():
                    break
        self.thread.join(max(0.0, deadline - time.monotonic()))
        if self.thread.is_alive():
            log.warning("logger: the trackers did not finish within %.0f s; leaving them (metrics.jsonl has every "
                        "step)", limit)
        if self.dropped:
            log.warning("logger: %d step record(s) were not sent: the trackers fell behind by logger.queue_size=%d "
                        "records", self.dropped, self.queue.maxsize)

    # -- the thread -------------------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            run = self.make_run()
        except Exception as error:  # noqa: BLE001 - a tracker never fails the run
            log.warning("logger: no tracker started: %s: %s (metrics.jsonl has every step)", type(error).__name__, error)
            while self._next_batch()[1] is None:  # the records go nowhere; the end marker ends the thread
                pass
            return
        live = []
        for sink in self.sinks:
            if self._call(sink, "start", run, self.state.of(sink.name))[0]:
                live.append(sink)
                self._write_state()  # its run id, at once: a crash from here on continues that run
        skip_through = {sink.name: self._already_logged(sink) for sink in live}
        earlier: Optional[list] = None
        while True:
            batch, end = self._next_batch()
            if earlier is None and batch:  # a resumed run: the steps before it that a tracker lacks
                earlier = self._records_before(batch[0][1]["step"], min(skip_through.values(), default=0))
                batch = earlier + batch
            for sink in list(live):
                through = skip_through[sink.name]
                records = [record for record in batch if record[1]["step"] > through]
                self._note_skipped(sink.name, [record[1]["step"] for record in batch[len(earlier or ()):]
                                               if record[1]["step"] <= through])
                self._note_backfilled(sink.name, [record[1]["step"] for record in (earlier or ())
                                                  if record[1]["step"] > through])
                if records and not self._call(sink, "log_records", records)[0]:
                    live.remove(sink)
                    continue
                if records:
                    self.state.of(sink.name)["logged_through"] = records[-1][1]["step"]
                    skip_through[sink.name] = records[-1][1]["step"]
            if earlier:
                earlier = []
            if batch:
                self._write_state()
            if end is not None:
                break
        self._say_skipped()
        summary, artifacts, failed, _ = end
        for sink in live:
            self._call(sink, "finish", summary, artifacts, failed)

    def _records_before(self, step: int, after: int) -> list[tuple[float, dict]]:
        """metrics.jsonl's records of the steps after `after` and before `step` (a resumed run's first), the last
        of each step: what a tracker that lost them (a killed offline W&B log) gets again."""
        if not self.resuming or step <= after + 1:
            return []
        from primus_hydra.backends.common.metrics import METRICS_FILE

        kept: dict[int, dict] = {}
        try:
            lines = (self.run_dir / METRICS_FILE).read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int) and after < record["step"] < step:
                kept[record["step"]] = record
        return [(time.time(), kept[number]) for number in sorted(kept)]

    def _next_batch(self) -> tuple[list, Optional[tuple]]:
        item = self.queue.get()
        batch = []
        while True:
            if isinstance(item, tuple) and len(item) == 4 and item[3] is _DONE:
                return batch, item
            batch.append(item)
            if len(batch) >= BATCH:
                return batch, None
            if len(batch) == 1:
                deadline = time.monotonic() + FLUSH_S
            try:  # records that come within FLUSH_S of the first go in one call: fewer calls, less of the CPU
                item = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return batch, None

    def _already_logged(self, sink: TrackerSink) -> int:
        """The last step this tracker run has: what the tracker reports, where it can tell, else what tracker.json
        says was sent to it."""
        _, reported = self._call(sink, "last_logged_step")
        return int(reported) if reported is not None else int(self.state.of(sink.name).get("logged_through", 0))

    def _call(self, sink: TrackerSink, method: str, *args: Any) -> tuple[bool, Any]:
        """(whether it worked, what it returned); a failure is one warning line."""
        try:
            return True, getattr(sink, method)(*args)
        except Exception as error:  # noqa: BLE001 - a tracker never fails the run
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            log.warning("logger %s: %s failed: %s: %s; the run goes on without it (metrics.jsonl has every step)",
                        sink.name, method, type(error).__name__, first_line[:300])
            return False, None

    def _write_state(self) -> None:
        try:
            self.state.write()
        except OSError as error:
            log.warning("logger: cannot write %s: %s", self.state.path, error)

    def _note_skipped(self, sink: str, steps: list[int]) -> None:
        if steps:
            self.skipped.setdefault(sink, []).extend(steps)

    def _note_backfilled(self, sink: str, steps: list[int]) -> None:
        if steps:
            log.info("logger %s: steps %d..%d, logged before this run resumed, were missing from the tracker: sent "
                     "from metrics.jsonl", sink, min(steps), max(steps))

    def _say_skipped(self) -> None:
        for sink, steps in self.skipped.items():
            log.info("logger %s: steps %d..%d were logged before this run resumed: not logged again (metrics.jsonl "
                     "has this run's values)", sink, min(steps), max(steps))


def tracker_artifacts(run_dir: Path, names: tuple[str, ...]) -> list[Path]:
    return [Path(run_dir) / name for name in names if (Path(run_dir) / name).is_file()]



def finish_trackers(trackers: ExperimentTrackers, cfg: Any, run_dir: Path, failed: bool) -> None:
    """The run's end for its trackers: the objective as a summary, the loss PNG and config_resolved.yaml as
    artifacts, the tracker runs ended (failed after a failure)."""
    from primus_hydra.backends.common.metrics import LOSS_PLOT_FILE, METRICS_FILE
    from primus_hydra.util.objective import run_objective

    summary = {}
    if not failed and (Path(run_dir) / METRICS_FILE).is_file():
        objective = run_objective(cfg, Path(run_dir), say=False)
        if math.isfinite(objective):
            summary["objective"] = objective
    trackers.finish(summary, tracker_artifacts(run_dir, (LOSS_PLOT_FILE, RESOLVED_CONFIG_ARTIFACT)), failed)
