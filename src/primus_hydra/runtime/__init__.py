"""The worker-side runtime: who am I in the job, logging, and the PrimusRuntime lifecycle."""
