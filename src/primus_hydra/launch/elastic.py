"""Single- and multi-node launch with torch's elastic agent, run in-process by the orchestrator (the code path
torchrun uses, without building a command line). The orchestrator never touches a GPU: it launches a job prepared
and planned already (orchestrator/prepare.py), picks or checks the port, writes the job config for the workers,
and reports a failed rank in one line."""
from __future__ import annotations

import gc
import logging
import os
import signal
import uuid
from pathlib import Path
from typing import Any

from primus_hydra.errors import PrimusError, user_error_type_names
from primus_hydra.launch.job_config import JOB_CONFIG_FILE, node_job_config_file, write_job_config
from primus_hydra.launch.ports import resolve_master_port
from primus_hydra.orchestrator.apply import report_resource_plan, worker_environment
from primus_hydra.orchestrator.prepare import PreparedJob
from primus_hydra.util.collector import collector_paused

log = logging.getLogger(__name__)


class WorkerFailedError(PrimusError):
    exit_code = 1


class JobInterruptedError(PrimusError):
    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


def import_what_the_workers_share(task_name: str) -> None:
    """What every forked worker of a `task_name` job would import for itself, imported once before the fork: a torch
    optimizer's first step imports torch._dynamo (torch.optim's graph-break wrapper), ~1.4 s and ~145 MB a process
    here; a training job's workers all make one. Other tasks' workers (benchmark, preflight) need none."""
    if task_name == "train":
        import torch._dynamo  # noqa: F401


def launch_elastic_job(job: PreparedJob, run_dir: Path) -> Any:
    """The job's plan decided its worker_env (threads per worker, compile threads) before any worker starts;
    workers inherit it and never change it.

    Workers are forked from this process (start_method="fork"): it has imported torch and the worker's modules
    already (and torch._dynamo for a training job), so no worker pays that again (~1 s with "spawn"), and they are
    this process's own children, so the agent sees at once which one died first. It never initialises CUDA/HIP, so
    forking it is safe; the workers' thread variables are set before it imports torch, because OpenMP reads them when
    torch loads."""
    with worker_environment(job.plan.worker_env), collector_paused(freeze_what_was_made=True):
        from torch.distributed import DistStoreError
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.elastic.rendezvous.api import RendezvousError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        from primus_hydra.launch.worker import worker_main

        import_what_the_workers_share(str(job.cfg.task.name))

    launch, plan = job.cfg.launch, job.plan
    nproc = plan.nproc_per_node
    port = resolve_master_port(launch.master_addr, launch.master_port, launch.nnodes)
    report_resource_plan(plan, run_dir)  # after the port: a job that cannot start prints only its error line
    worker_env = plan.worker_env
    threads = worker_env.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"))
    job_config = write_job_config(job, run_dir, JOB_CONFIG_FILE if launch.nnodes == 1 else node_job_config_file(launch.node_rank))
    worker_logs = run_dir / "logs" / "workers"
    config = LaunchConfig(
        min_nodes=launch.nnodes,
        max_nodes=launch.nnodes,
        nproc_per_node=nproc,
        run_id=f"primus-{uuid.uuid4().hex[:8]}" if launch.nnodes == 1 else "primus",
        rdzv_backend=launch.rdzv_backend,
        rdzv_endpoint=f"{launch.master_addr}:{port}",
        rdzv_configs=_rendezvous_configs(launch),
        max_restarts=launch.max_restarts,
        monitor_interval=launch.monitor_interval,
        start_method="fork",
        # local rank 0 talks to the terminal (progress bar, log lines); the others write files only
        logs_specs=DefaultLogsSpecs(log_dir=str(worker_logs), redirects={r: Std.ALL for r in range(1, nproc)}),
        shutdown_timeout=launch.shutdown_timeout_s,
        signals_to_handle="SIGTERM,SIGINT,SIGHUP",
    )
    log.info("launching %d worker(s) per node x %d node(s), rendezvous %s:%d (%s), %s thread(s) per worker", nproc,
             launch.nnodes, launch.master_addr, port, launch.rdzv_backend, threads)
    try:
        with worker_environment(worker_env):
            results = elastic_launch(config, worker_main)(str(job_config), str(run_dir))
    except ChildFailedError as error:
        raise _describe_failure(error, run_dir) from None
    except (RendezvousError, DistStoreError) as error:  # a node that never joined (not started, wrong address)
        detail = (str(error).splitlines() or [""])[0][:200] or type(error).__name__
        raise PrimusError(
            f"launch.nnodes={launch.nnodes}: the nodes did not all meet at {launch.master_addr}:{port} within "
            f"launch.timeout_s={launch.timeout_s:g} s ({detail}); start the same command on every node with its "
            "launch.node_rank") from None
    except SignalException as error:
        name = signal.Signals(error.sigval).name
        raise JobInterruptedError(
            f"stopped by {name}: all workers were stopped (with module.checkpoint.on_signal=true they saved a checkpoint first)",
            int(error.sigval),
        ) from None
    finally:
        gc.unfreeze()  # what was frozen for the fork is collectable again (the API launches in the caller's process)
    return results.get(0)


def _rendezvous_configs(launch) -> dict:
    """The nodes meet within launch.timeout_s (torch's own default is 600 s whatever the config says)."""
    timeout = max(1, int(round(launch.timeout_s)))
    if launch.rdzv_backend == "static":
        return {"rank": launch.node_rank, "timeout": timeout}
    return {"join_timeout": timeout}


def _describe_failure(error, run_dir: Path) -> PrimusError:
    rank, failure = error.get_first_failure()
    message = failure.message.get("message", "") if isinstance(failure.message, dict) else str(failure.message)
    type_name, _, text = message.partition(": ")
    if type_name in user_error_type_names() and text:
        user_error = PrimusError("\n".join(f"rank {rank}: {line}" for line in text.splitlines()))
        user_error.exit_code = failure.exitcode if failure.exitcode > 0 else 2
        return user_error
    where = run_dir / "logs" / f"rank_{rank}.log"
    stderr = Path(failure.error_file).parent / "stderr.log" if failure.error_file and failure.error_file != "<N/A>" else None
    if stderr is not None and stderr.is_file():
        where = f"{where} and {stderr}"
    exit_text = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit code {failure.exitcode}"
    summary = (message.splitlines() or ["no error recorded"])[0]
    return WorkerFailedError(f"rank {rank} failed ({exit_text}): {summary}; its log: {where}")
