"""The orchestrator's side of a job: what this machine has, and the knobs resolved from it (no torch import)."""
