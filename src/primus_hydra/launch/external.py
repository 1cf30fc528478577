"""When a user's launcher already started the ranks (`torchrun -m primus_hydra ...`, `srun python -m ...`), every
rank runs the CLI and composes: Hydra would give each its own timestamped run dir and each would write
`.hydra/` and the job log (hydra #2070, lightning-hydra-template #393). These overrides make all ranks share
one run dir named after the job, and leave Hydra's own files to rank 0."""
from __future__ import annotations

import os
import time
from typing import Mapping

from primus_hydra.distributed_env import detect_distributed_env


def shared_run_dir(environ: Mapping[str, str]) -> str:
    root = environ.get("PRIMUS_OUTPUT_ROOT", "outputs")
    day = time.strftime("%Y-%m-%d")
    if "SLURM_JOB_ID" in environ and "TORCHELASTIC_RUN_ID" not in environ:
        return f"{root}/{day}/slurm-{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', '0')}"
    job = environ.get("TORCHELASTIC_RUN_ID", "job")
    return f"{root}/{day}/torchrun-{job}-{environ.get('MASTER_ADDR', 'local')}-{environ.get('MASTER_PORT', '0')}"


def overrides_for_external_launch(argv: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    dist = detect_distributed_env(environ)
    if not dist.is_distributed or any(arg in ("-m", "--multirun") for arg in argv):
        return []
    overrides = []
    if not any(arg.startswith("hydra.run.dir=") for arg in argv):
        overrides.append(f"hydra.run.dir={environ.get('PRIMUS_RUN_DIR') or shared_run_dir(environ)}")
    if not dist.is_main:
        overrides += ["hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none"]
    return overrides
