"""Sweeps: the points of a `-m` run composed and labelled, probed, run on a local pool of processes (or Hydra's
basic launcher) under a concurrency the orchestrator works out, and summarized."""
