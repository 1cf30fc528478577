"""Shared test helpers (not tests): composing the real conf/, running the CLI, the recording backend, the local
Slurm cluster. Importable as `helpers.*` (pyproject.toml puts tests/ on the path)."""
