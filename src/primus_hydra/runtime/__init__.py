"""The worker-side runtime: per-rank logging and the PrimusRuntime lifecycle of a prepared job (who am I in the
job is primus_hydra.distributed_env, shared with the orchestrator)."""
