"""The orchestrator's side of a job (no torch import): what this machine has, the knobs resolved from it, and
prepare(), which validates, plans and checks a job once before anything starts (prepare.py)."""
