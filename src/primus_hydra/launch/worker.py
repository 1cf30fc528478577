"""The worker side of an elastically launched job: load the orchestrator's config, run the runtime.

A user error is recorded in the agent's error file (so the orchestrator prints it as one line) and exits with
its code; any other exception is recorded with its traceback by torch's @record.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

from primus_hydra.errors import PrimusError

CONSOLE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def configure_worker_logging(rank: int) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(CONSOLE_FORMAT))
    handler.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


@record
def worker_main(job_config_path: str, run_dir: str) -> Any:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a forked worker must not keep the agent's handlers
        signal.signal(signum, signal.SIG_DFL)
    configure_worker_logging(int(os.environ.get("RANK", "0")))
    from primus_hydra.launch.job_config import load_job_config
    from primus_hydra.runtime.train_runtime import PrimusRuntime

    try:
        return PrimusRuntime(load_job_config(Path(job_config_path)), Path(run_dir)).run()  # the prepared job, trusted
    except PrimusError as error:
        ErrorHandler().record_exception(error)
        sys.exit(error.exit_code)
