"""task=plan: the resource plan this config would get on this machine, as JSON on stdout (no torch, no files).

A single run prints one indented JSON document. A multirun (-m) prints one compact JSON object per point and
line (JSON Lines), each planned for the sweep's full number of points and tagged with the point's overrides.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.orchestrator.prepare import HANDOFF, prepare, show_warnings


class PlanTask:
    writes_nothing = True  # no run dir, whatever hydra.run.dir says (tasks/callback.py)
    # under -m (hydra/launcher=primus_local, set by conf/task/plan.yaml) the points run in the sweep's process
    runs_sweep_points_in_process = True

    def __init__(self, cfg: DictConfig, job=None, point: Optional[dict] = None):
        self.cfg = cfg
        self.job = job
        self.point = point  # {"num": ..., "overrides": [...]} of a sweep point; None: read from Hydra
    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None, sweep_points: Optional[int] = None,
                    handed_over: bool = False):
        """handed_over: `cfg` was composed for this job alone (tasks/query.py): prepared in place, not copied."""
        points = sweep_points if sweep_points is not None else (_sweep_points() if _sweep_point() else 1)
        return prepare(cfg, plan=plan, sweep_points=points, trains=False, handed_over=handed_over)

    def run(self) -> dict:
        job = self.job or HANDOFF.take(handed_over_at())
        if job is None:  # a sweep point of another launcher than primus_local (conf/task/plan.yaml chooses it)
            job = self.prepare_job(self.cfg, None)
            show_warnings(job)
        point = self.point or _sweep_point()
        data = job.plan.to_dict()
        if point is None:
            print(json.dumps(data, indent=2))
        else:
            print(json.dumps({"point": point, **data}))
        return data


def handed_over_at() -> Path:
    """The run dir the single-run callback handed the job over for: Hydra's for this job (`.`, as conf/task/plan.yaml
    sets hydra.run.dir, or the one primus_hydra.run was given)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else Path(".")


def _sweep_point() -> Optional[dict]:
    from hydra.core.hydra_config import HydraConfig

    from primus_hydra.launch.sweep.concurrency import in_multirun

    if not in_multirun():
        return None
    job = HydraConfig.get().job
    return {"num": job.num, "overrides": list(HydraConfig.get().overrides.task)}


def _sweep_points() -> int:
    """The number of points of this multirun: the product of the sweep overrides' lengths on the command line
    (Hydra's basic sweeper takes their cartesian product). Glob sweeps count as one."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # whatever Hydra accepted but we cannot count: plan for one point
        return 1
    points = 1
    for override in parsed:
        if override.is_sweep_override() and not override.is_hydra_override():
            try:
                points *= max(1, len(list(override.sweep_iterator())))
            except Exception:
                pass
    return points
