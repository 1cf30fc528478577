"""What `task.run` names for task=logs and task=cancel: a run dir, a sweep dir (its runs) or a Slurm job id (the
run dirs under the output roots whose submission record holds it). Anything else is one line, exit 2."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from primus_hydra.errors import PrimusError
from primus_hydra.launch.provenance import PROVENANCE_FILE
from primus_hydra.launch.run_dir_lock import LOCK_FILE
from primus_hydra.launch.slurm.submission import SUBMISSION_RECORD, read_submission

JOB_ID = re.compile(r"\d+(_\d+)?")
RUN_MARKERS = (Path(".hydra") / "config.yaml", SUBMISSION_RECORD, PROVENANCE_FILE, LOCK_FILE)


def is_run_dir(path: Path) -> bool:
    return any((path / marker).is_file() for marker in RUN_MARKERS)


def runs_of(value: object, key: str = "task.run") -> list[Path]:
    """The run dirs `value` names, sorted; PrimusError (one line) when it names none."""
    if value is None or str(value).strip() == "":
        raise PrimusError(f"{key} is not set; give a run dir, a sweep dir or a Slurm job id ({key}=<...>)")
    text = str(value).strip()
    path = Path(text).expanduser()
    if path.is_dir():
        if is_run_dir(path):
            return [path]
        found = sorted({marker_dir for marker in RUN_MARKERS for marker_dir in _dirs_holding(path, marker)})
        if not found:
            raise PrimusError(f"{key}={text}: not a run dir (no .hydra/config.yaml, .primus/slurm_job.json or "
                              ".primus/provenance.json) and no run dir under it; give a run dir, a sweep dir or a "
                              "Slurm job id")
        expected = sweep_points(path)
        submitted = any((run_dir / SUBMISSION_RECORD).is_file() for run_dir in found)
        if expected is not None and len(found) < expected and (submitted or not any(map(_live, found))):
            raise PrimusError(f"{key}={text}: the sweep {'submitted' if submitted else 'has'} {expected} points but "
                              f"{len(found)} of their run dirs are there; give one point's run dir"
                              + (", or the Slurm job id of the array" if submitted else ""))
        return found
    if JOB_ID.fullmatch(text):
        return runs_of_job(text, key)
    raise PrimusError(f"{key}={text}: no such directory, and not a Slurm job id (digits, or <array>_<index>); give "
                      "a run dir, a sweep dir or a Slurm job id")


def _dirs_holding(root: Path, marker: Path) -> list[Path]:
    depth = len(marker.parts)
    return [found.parents[depth - 1] for found in root.glob(f"**/{marker}")]


def runs_of_job(job_id: str, key: str = "task.run") -> list[Path]:
    """The run dirs under the output roots whose Slurm job is `job_id` (an array's id names all its points)."""
    from primus_hydra.tasks.status import default_roots, find_submitted_runs

    roots = default_roots()
    matches = []
    for run_dir in find_submitted_runs([root for root in roots if root.is_dir()]):
        recorded = str((read_submission(run_dir) or {}).get("job_id", ""))
        if recorded == job_id or recorded.split("_")[0] == job_id:
            matches.append(run_dir)
    if not matches:
        where = ", ".join(str(root) for root in roots)
        raise PrimusError(f"{key}={job_id}: no run under {where} records Slurm job {job_id}; give its run dir "
                          "(or set PRIMUS_OUTPUT_ROOT to the output root it was submitted from)")
    return matches


def _live(run_dir: Path) -> bool:
    """A process holds the run dir's lock (a local sweep still running makes its points' dirs as it goes)."""
    from primus_hydra.launch.run_dir_lock import RUN_DIR_LOCKS, RunDirBusyError

    try:
        RUN_DIR_LOCKS.check_free(run_dir)
    except RunDirBusyError:
        return True
    return False


def sweep_points(sweep_dir: Path) -> Optional[int]:
    """How many points a sweep has, from the discrete sweeps of its multirun.yaml; None when it is no sweep dir,
    or its points cannot be counted (a sweeper's search space, a glob)."""
    from omegaconf import OmegaConf

    from primus_hydra.launch.sweep.basic import SWEEP_RECORD

    record = sweep_dir / SWEEP_RECORD
    if not record.is_file():
        return None
    try:
        config = OmegaConf.load(record)
        overrides = [str(item) for item in OmegaConf.select(config, "hydra.overrides.task", default=[])]
        if OmegaConf.select(config, "hydra.sweeper.params", default=None):
            return None
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.core.override_parser.types import Glob

        points = 1
        for override in OverridesParser.create().parse_overrides(overrides):
            if not override.is_sweep_override():
                continue
            if not override.is_discrete_sweep() or isinstance(override.value(), Glob):
                return None
            points *= len(list(override.sweep_iterator()))
        return points
    except Exception:  # noqa: BLE001 - a record that cannot be read or parsed: nothing to count against
        return None
