"""What runs on the Slurm nodes: the submitted callable (pickled by submitit, so it stays small and importable).

srun mode: this process is one rank; it exports torch.distributed's variables from the Slurm task and runs
the worker runtime on the prepared job. torchrun mode: this process is the node's elastic agent (c10d
rendezvous on the first node), which starts the node's ranks. Either way the job is the one composed and
prepared on the submitting machine; nothing is recomposed or validated again here. Each node resolves the
job's `auto` knobs for its own CPUs, memory and GPUs (orchestrator/prepare.py: plan_on_this_node).

Preemption and time limits: Slurm (via submitit's --signal) sends USR2; the trainer checkpoints at the end of the
step its ranks agree on, then rank 0 asks submitit to requeue this callable with `attempt + 1`, and the rerun
resumes from that checkpoint in the same run dir. Every other rerun resumes too: Slurm's own requeue (after a
node failure) and `scontrol requeue` rerun the submitted callable (attempt 0) with SLURM_RESTART_COUNT > 0.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Mapping

from primus_hydra.distributed_env import detect_distributed_env
from primus_hydra.errors import PrimusError
from primus_hydra.launch.frozen_user_path import put_frozen_user_code_first
from primus_hydra.launch.job_config import load_job_config
from primus_hydra.launch.provenance import record_provenance
from primus_hydra.launch.run_dir_lock import RUN_DIR_LOCKS
from primus_hydra.orchestrator.prepare import plan_on_this_node

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SlurmTaskEnv:
    """This task's place in the job, read from Slurm's variables (not from submitit's TorchDistributedEnvironment,
    which would also set CUDA_VISIBLE_DEVICES=<local rank> on CPU-only nodes)."""

    job_id: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int


def read_slurm_task_env(environ: Mapping[str, str] = os.environ) -> SlurmTaskEnv:
    """From Slurm's variables only (through the same reader a user's own srun uses): torchrun or MASTER_* variables
    that sbatch copied from the submitting shell must not decide where ranks meet. PRIMUS_MASTER_ADDR overrides."""
    slurm = {key: value for key, value in environ.items() if key.startswith("SLURM_")}
    if environ.get("PRIMUS_MASTER_ADDR"):
        slurm["MASTER_ADDR"] = environ["PRIMUS_MASTER_ADDR"]
    dist = detect_distributed_env(slurm)
    try:
        socket.getaddrinfo(dist.master_addr, None)
    except OSError:
        raise PrimusError(
            f"the job's first node {dist.master_addr!r} does not resolve on {socket.gethostname()}: ranks could not meet "
            "there; fix the cluster's name resolution or set PRIMUS_MASTER_ADDR (e.g. in hydra.launcher.setup)"
        ) from None
    array = environ.get("SLURM_ARRAY_JOB_ID")
    return SlurmTaskEnv(
        job_id=f"{array}_{environ.get('SLURM_ARRAY_TASK_ID', '0')}" if array else environ.get("SLURM_JOB_ID", "0"),
        rank=dist.rank, world_size=dist.world_size, local_rank=dist.local_rank, local_world_size=dist.local_world_size,
        node_rank=dist.node_rank, nnodes=max(dist.world_size // dist.local_world_size, 1),
        master_addr=dist.master_addr, master_port=dist.master_port,
    )


def export_torch_distributed_env(task: SlurmTaskEnv) -> None:
    os.environ.update({
        "RANK": str(task.rank), "WORLD_SIZE": str(task.world_size), "LOCAL_RANK": str(task.local_rank),
        "LOCAL_WORLD_SIZE": str(task.local_world_size), "GROUP_RANK": str(task.node_rank),
        "MASTER_ADDR": task.master_addr, "MASTER_PORT": str(task.master_port),
    })


class PreemptionNotice:
    """Holds back submitit's USR2 handler (which would requeue at once, killing ranks mid-checkpoint) until the
    trainer has written its checkpoint; remembers that the notice came."""

    def __init__(self) -> None:
        self.submitit_handler = signal.getsignal(signal.SIGUSR2)
        self.received = False
        signal.signal(signal.SIGUSR2, self._remember)

    def _remember(self, signum, frame) -> None:
        self.received = True

    def requeue_and_exit(self) -> None:
        """Rank 0: let submitit dump our checkpoint() and `scontrol requeue` the job (it then exits)."""
        handler = getattr(self.submitit_handler, "__self__", None)
        if handler is None or not hasattr(handler, "checkpoint_and_try_requeue"):
            raise RuntimeError("submitit's preemption handler is not installed: not running inside a submitit job")
        handler.checkpoint_and_try_requeue(signal.SIGUSR2)


def slurm_restart_count(environ: Mapping[str, str] = os.environ) -> int:
    """How often Slurm has started this job before (any requeue: Slurm's, scontrol's, submitit's)."""
    try:
        return int(environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0


@dataclasses.dataclass(frozen=True)
class SlurmJobEntry:
    job_config: str  # <run_dir>/.primus/job_config.yaml, written on the submitting machine
    run_dir: str
    mode: str  # srun | torchrun
    attempt: int = 0  # 0 for the first run; +1 for every requeue after a preemption or time limit

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit calls this on the preemption signal: the requeued job resumes from the latest checkpoint."""
        import submitit

        return submitit.helpers.DelayedSubmission(dataclasses.replace(self, attempt=self.attempt + 1))

    def __call__(self) -> Any:
        put_frozen_user_code_first()
        notice = PreemptionNotice()
        task = read_slurm_task_env()
        job = load_job_config(Path(self.job_config))
        cfg = job.cfg
        cfg.module.checkpoint.on_signal = True  # a preempted or timed-out job must leave a checkpoint to resume from
        restarts = slurm_restart_count()
        if (self.attempt > 0 or restarts > 0) and cfg.module.checkpoint.resume is None:
            cfg.module.checkpoint.resume = "auto"  # a rerun continues the run from its checkpoints
        print(f"[primus] slurm job {task.job_id} attempt {self.attempt}: restart {restarts}, {self.mode} mode, rank {task.rank}/"
              f"{task.world_size} on node {task.node_rank}/{task.nnodes}, master {task.master_addr}:{task.master_port}",
              file=sys.stderr, flush=True)
        owner = task.rank == 0 if self.mode == "srun" else task.node_rank == 0
        try:
            if not owner:
                return self._run(job, task)
            with RUN_DIR_LOCKS.holding(Path(self.run_dir)):
                record_provenance(Path(self.run_dir), None, launcher=f"slurm_{self.mode}")  # this start, appended
                return self._run(job, task)
        except BaseException as error:  # noqa: B902 - a preempted job must requeue whatever the stop looked like
            # srun mode: the trainer took over USR2 and stopped with it; torchrun mode: this agent got the notice
            preempted = notice.received or getattr(error, "signum", None) == signal.SIGUSR2
            if not preempted or isinstance(error, KeyboardInterrupt):
                raise
            if owner:
                print(f"[primus] preempted: checkpoint written, requeueing (attempt {self.attempt + 1})",
                      file=sys.stderr, flush=True)
                notice.requeue_and_exit()
            raise SystemExit(0) from None  # no result file: the requeued run writes it

    def _run(self, job, task: SlurmTaskEnv) -> Any:
        if self.mode == "srun":
            from primus_hydra.orchestrator.apply import report_resource_plan
            from primus_hydra.runtime.train_runtime import PrimusRuntime

            # this node's share for each of its tasks (threads, data loader workers), set before torch is imported
            job = plan_on_this_node(job, nproc_per_node=task.local_world_size)
            if task.rank == 0:
                report_resource_plan(job.plan, Path(self.run_dir))
            os.environ.update({key: value for key, value in job.plan.worker_env.items() if key not in os.environ})
            export_torch_distributed_env(task)
            return PrimusRuntime(job, Path(self.run_dir)).run()
        from primus_hydra.launch.elastic import launch_elastic_job

        launch = job.cfg.launch
        launch.nnodes = task.nnodes
        launch.node_rank = task.node_rank
        launch.master_addr = task.master_addr
        launch.master_port = task.master_port
        launch.rdzv_backend = "c10d"
        # this agent is the node's orchestrator: it resolves the auto knobs for its node and its workers
        return launch_elastic_job(plan_on_this_node(job), Path(self.run_dir))
