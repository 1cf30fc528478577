"""Slurm through submitit: shape a job from the composed config, submit it (alone or as an array), run it on the
nodes (srun or torchrun mode), requeue on preemption, and wait for / report its state."""
