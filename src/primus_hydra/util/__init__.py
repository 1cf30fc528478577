"""Small helpers every layer may use, on the ground floor of the import graph: terminal tables, files only their
owner reads, an environment restored after a block, a process ended without teardown. Pure Python: nothing here
imports torch or Hydra."""
