"""A plain run (no -m) on Slurm: Hydra uses launchers only in multirun (hydra #851), so task=train submits its
own job when the selected launcher is primus_slurm, into the run dir Hydra made for it (one run dir per job)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from primus_hydra.errors import PrimusError
from primus_hydra.orchestrator.prepare import PreparedJob

SLURM_LAUNCHER_TARGET = "hydra_plugins.primus_slurm_launcher.primus_slurm_launcher.PrimusSlurmLauncher"


class SlurmJobFailedError(PrimusError):
    exit_code = 1


def submit_single_run(job: PreparedJob, run_dir: Path, settings: dict) -> Any:
    from primus_hydra.launch.slurm.monitor import describe_submission, wait_for_jobs
    from primus_hydra.launch.slurm.submission import stage_job, submit_jobs

    jobs = submit_jobs([stage_job(job, run_dir, settings)], settings, run_dir)
    print(f"submitted {describe_submission(jobs[0])}", file=sys.stderr, flush=True)
    if not job.cfg.launch.wait:
        print_status_hint([run_dir])
        return None
    outcome = wait_for_jobs(jobs, float(settings.get("poll_interval_s", 2.0)))[0]
    if not outcome.ok:
        raise SlurmJobFailedError(outcome.error)
    return outcome.result


def print_status_hint(run_dirs: list[Path]) -> None:
    where = run_dirs[0] if len(run_dirs) == 1 else run_dirs[0].parent
    print(f"launch.wait=false: not waiting. Follow with: python -m primus_hydra task=status task.runs={where}",
          file=sys.stderr, flush=True)
