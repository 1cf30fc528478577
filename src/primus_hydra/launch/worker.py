"""The worker side of an elastically launched job: load the orchestrator's config, run the runtime.

A user error is recorded in the agent's error file (so the orchestrator prints it as one line) and exits with
its code; any other exception is recorded with its traceback by torch's @record. A rank that fails because a peer
went away waits a moment first: the agent names the first worker it finds dead, and that must be the peer.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

from primus_hydra.errors import PrimusError
from primus_hydra.launch.frozen_user_path import put_frozen_user_code_first
from primus_hydra.launch.job_config import load_job_config
from primus_hydra.runtime.train_runtime import PrimusRuntime

CONSOLE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
# what a collective raises when another rank died (gloo, NCCL): this rank is not the cause
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote process exited",
             "NCCL communicator was aborted")
PEER_LOST_GRACE_S = 1.0  # ten of the agent's health checks (launch.monitor_interval=0.1)


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
    _size_thread_pool_from_env()
    put_frozen_user_code_first()  # a Slurm job's frozen user code before the working directory

    try:
        return PrimusRuntime(load_job_config(Path(job_config_path)), Path(run_dir)).run()  # the prepared job, trusted
    except PrimusError as error:
        ErrorHandler().record_exception(error)
        sys.exit(error.exit_code)
    except Exception as error:
        if any(text in str(error) for text in PEER_LOST):
            time.sleep(PEER_LOST_GRACE_S)  # let the agent find the rank that died first
        raise


def _size_thread_pool_from_env() -> None:
    """A worker forked from a process that had loaded torch keeps that process's OpenMP pool: size it to the
    worker's OMP_NUM_THREADS (the plan's share), as a freshly started one would be."""
    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0 and torch.get_num_threads() != int(threads):
        torch.set_num_threads(int(threads))
