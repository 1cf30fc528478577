"""`hydra/launcher=primus_local`: multirun points side by side on this machine (see primus_hydra.launch.sweep.local)."""
