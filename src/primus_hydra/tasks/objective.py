"""task.objective, read from a run's metrics.jsonl: util/objective.py (the bottom layer, so that the workers' experiment
trackers report the same number as the launchers)."""
from primus_hydra.util.objective import METRICS_FILE, run_objective

__all__ = ["METRICS_FILE", "run_objective"]
