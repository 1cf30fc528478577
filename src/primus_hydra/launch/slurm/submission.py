"""Submit prepared jobs to Slurm through submitit: one job, or one job array per job shape.

Runs on the submitting machine. Every job was prepared for its Slurm world size (orchestrator/prepare.py) before
anything is written; staging writes its config to <run_dir>/.primus/job_config.yaml, which the nodes read and
trust (no recomposition, no second validation).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any, Mapping, Optional

from primus_hydra.errors import PrimusError
from primus_hydra.launch.job_config import write_job_config
from primus_hydra.launch.slurm.entry import SlurmJobEntry
from primus_hydra.launch.slurm.job_shape import SlurmJobShape, executor_parameters, job_shape
from primus_hydra.orchestrator.prepare import PreparedJob

log = logging.getLogger(__name__)

SUBMISSION_RECORD = Path(".primus") / "slurm_job.json"


@dataclass
class StagedJob:
    """A prepared job whose run dir holds its job config, ready to submit."""

    label: str  # "run" or "job N: overrides", for messages
    run_dir: Path
    shape: SlurmJobShape
    entry: SlurmJobEntry


@dataclass
class SubmittedJob:
    staged: StagedJob
    job: Any  # submitit.SlurmJob

    @property
    def job_id(self) -> str:
        return str(self.job.job_id)


def stage_job(job: PreparedJob, run_dir: Path, settings: Mapping[str, Any], label: str = "run") -> StagedJob:
    """Write the config the job's nodes will read into its run dir."""
    shape = job_shape(job.cfg, settings)
    run_dir.mkdir(parents=True, exist_ok=True)
    job_config = write_job_config(job, run_dir)
    entry = SlurmJobEntry(job_config=str(job_config.resolve()), run_dir=str(run_dir.resolve()), mode=str(shape.mode))
    return StagedJob(label=label, run_dir=run_dir, shape=shape, entry=entry)


def submit_jobs(staged: list[StagedJob], settings: Mapping[str, Any], base_dir: Path) -> list[SubmittedJob]:
    """Jobs of the same shape go out as one array (Slurm arrays share their resources); each job's id is
    recorded in its run dir for task=status."""
    import submitit

    folder = settings.get("submitit_folder") or str(base_dir / ".submitit" / "%j")
    submitted: list[SubmittedJob] = []
    for shape, group in groupby(staged, key=lambda job: job.shape):
        group = list(group)
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=int(settings.get("max_num_timeout", 3)))
        executor.update_parameters(**executor_parameters(settings, shape, str(settings.get("name") or "primus")))
        try:
            if len(group) == 1:
                jobs = [executor.submit(group[0].entry)]
            else:
                with executor.batch():
                    jobs = [executor.submit(job.entry) for job in group]
        except (submitit.core.utils.FailedJobError, OSError) as error:
            reason = " ".join(str(error).split()) or type(error).__name__
            raise PrimusError(f"submitting to Slurm failed ({len(group)} job(s), nothing else submitted after): {reason}") from None
        submitted += [SubmittedJob(staged=job, job=slurm_job) for job, slurm_job in zip(group, jobs)]
    for job in submitted:
        _record_submission(job)
    return submitted


def _record_submission(submitted: SubmittedJob) -> None:
    shape = submitted.staged.shape
    record = {
        "job_id": submitted.job_id,
        "label": submitted.staged.label,
        "submitit_folder": str(Path(submitted.job.paths.folder).resolve()),
        "mode": shape.mode,
        "nodes": shape.nodes,
        "tasks_per_node": shape.tasks_per_node,
        "world_size": shape.world_size,
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    target = submitted.staged.run_dir / SUBMISSION_RECORD
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=2) + "\n")


def read_submission(run_dir: Path) -> Optional[dict]:
    """The run's submission record; None when there is none. A record that cannot be read (corrupt, not an
    object, no job id) comes back as {"unreadable": why}, so that one bad file never hides the other runs."""
    path = Path(run_dir) / SUBMISSION_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:  # ValueError covers bad JSON and bytes that are not UTF-8
        return {"unreadable": f"{SUBMISSION_RECORD} is not JSON ({type(error).__name__})"}
    if not isinstance(record, dict):
        return {"unreadable": f"{SUBMISSION_RECORD} holds a {type(record).__name__}, not an object"}
    if not str(record.get("job_id") or "").strip():
        return {"unreadable": f"{SUBMISSION_RECORD} has no job_id"}
    return record
