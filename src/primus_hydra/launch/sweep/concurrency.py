"""How many points of a sweep run side by side when a launcher other than ours runs them, so that each point's
resource plan divides the cores among that many jobs (not `1 of 1` with every core, which oversubscribes them).

- Hydra's basic launcher: one after another in this process, 1.
- joblib (hydra/launcher=joblib): `n_jobs` workers, joblib's rules (None: 1; -1: every core; -2: all but one).
- submitit_local (hydra/launcher=submitit_local): every point of a batch starts at once, up to
  `array_parallelism`; a point does not know its batch's size, so it counts every core as taken (a batch smaller
  than the machine plans fewer threads than it could use: set `hydra.launcher.array_parallelism` to the batch).
Our own launchers (primus_local, primus_slurm) plan their points themselves.
"""
from __future__ import annotations

from typing import Any, Mapping

from primus_hydra.orchestrator.resources import detect_resources

JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
SUBMITIT_LOCAL_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"


def points_run_at_once(launcher: Mapping[str, Any], vcpus: int) -> int:
    target = str(launcher.get("_target_", ""))
    if target == JOBLIB_LAUNCHER:
        n_jobs = launcher.get("n_jobs")
        if n_jobs is None or n_jobs == 0:
            return 1
        return max(1, int(n_jobs) if n_jobs > 0 else vcpus + 1 + int(n_jobs))
    if target == SUBMITIT_LOCAL_LAUNCHER:
        return max(1, min(int(launcher.get("array_parallelism") or vcpus), vcpus))
    return 1


def points_run_at_once_here() -> int:
    """For the sweep point this process runs (HydraConfig set by run_job); 1 outside a multirun."""
    from hydra.core.hydra_config import HydraConfig

    if not in_multirun():
        return 1
    return points_run_at_once(HydraConfig.get().launcher, detect_resources().vcpus)


def in_multirun() -> bool:
    """This process runs a point of a Hydra multirun (HydraConfig set by run_job with mode MULTIRUN)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.initialized() and str(HydraConfig.get().mode) == "RunMode.MULTIRUN"
