"""hydra/launcher=primus_slurm (see primus_slurm_launcher.py)."""
