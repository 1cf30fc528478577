"""Starting the job's processes: torch's elastic agent in the orchestrator process (multi-node Slurm later)."""
