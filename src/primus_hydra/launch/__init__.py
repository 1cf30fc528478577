"""Starting the job's processes: torch's elastic agent in the orchestrator process, local sweeps, Slurm."""
