"""Who am I in the job: a torchrun/elastic worker, a Slurm task (srun), or a single process.

Read from the environment only; nothing here imports torch or initializes a device.
"""
from __future__ import annotations

import os
import re
from typing import Mapping

from primus_hydra.util.records import record


@record(frozen=True)
class DistributedEnv:
    launcher: str  # "single" | "torchrun" | "slurm"
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def first_host(nodelist: str) -> str:
    """The first host of a Slurm nodelist: "gpu-a[07-09,12],gpu-b3" -> "gpu-a07" (zero padding kept)."""
    head = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?([^,]*)", nodelist.strip())
    prefix, ranges, suffix = head.groups() if head else ("", None, "")
    first = re.split(r"[,-]", ranges)[0] if ranges else ""
    return f"{prefix}{first}{suffix}"


def slurm_master_port(job_id: int, restart_count: int = 0) -> int:
    """The rendezvous port every task of a Slurm job derives alike; a requeued run gets another (TIME_WAIT)."""
    return 20000 + (job_id + restart_count * 7919) % 40000


def _int(environ: Mapping[str, str], key: str, default: int) -> int:
    value = environ.get(key)
    return int(value) if value not in (None, "") else default


def detect_distributed_env(environ: Mapping[str, str] = os.environ) -> DistributedEnv:
    if "RANK" in environ and "WORLD_SIZE" in environ and "LOCAL_RANK" in environ:
        # torchrun or torch's elastic agent (a user's torchrun, our own launch): the standard variables are complete;
        # an srun task whose variables the Slurm launcher exported (no elastic agent) is a Slurm rank
        from_srun = "SLURM_PROCID" in environ and "TORCHELASTIC_RUN_ID" not in environ
        return DistributedEnv(
            launcher="slurm" if from_srun else "torchrun",
            rank=_int(environ, "RANK", 0),
            world_size=_int(environ, "WORLD_SIZE", 1),
            local_rank=_int(environ, "LOCAL_RANK", 0),
            local_world_size=_int(environ, "LOCAL_WORLD_SIZE", 1),
            node_rank=_int(environ, "GROUP_RANK", 0),
            master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(environ, "MASTER_PORT", 29500),
        )
    if "SLURM_STEP_ID" in environ and "SLURM_PROCID" in environ:
        # a task of an srun step (a bare sbatch script has no step id and is a single process)
        world = _int(environ, "SLURM_STEP_NUM_TASKS", _int(environ, "SLURM_NTASKS", 1))
        nodes = max(_int(environ, "SLURM_STEP_NUM_NODES", _int(environ, "SLURM_NNODES", 1)), 1)
        job_id = _int(environ, "SLURM_JOB_ID", 0)
        return DistributedEnv(
            launcher="slurm",
            rank=_int(environ, "SLURM_PROCID", 0),
            world_size=world,
            local_rank=_int(environ, "SLURM_LOCALID", 0),
            local_world_size=max(world // nodes, 1),
            node_rank=_int(environ, "SLURM_NODEID", 0),
            master_addr=environ.get("MASTER_ADDR") or first_host(environ.get("SLURM_JOB_NODELIST", "")) or "127.0.0.1",
            master_port=_int(environ, "MASTER_PORT", slurm_master_port(job_id, _int(environ, "SLURM_RESTART_COUNT", 0))),
        )
    return DistributedEnv(launcher="single")


# (variable, smallest value allowed): what torchrun and srun export, read above
LAUNCH_INTEGERS = (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0), ("LOCAL_WORLD_SIZE", 1), ("GROUP_RANK", 0),
                   ("MASTER_PORT", 1), ("SLURM_PROCID", 0), ("SLURM_LOCALID", 0), ("SLURM_NODEID", 0),
                   ("SLURM_NTASKS", 1), ("SLURM_STEP_NUM_TASKS", 1), ("SLURM_STEP_NUM_NODES", 1), ("SLURM_NNODES", 1))
# set by a launcher, never by hand: with RANK/WORLD_SIZE but none of these, the variables were left in a shell
LAUNCHER_MARKERS = ("TORCHELASTIC_RUN_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def launch_environment_failures(environ: Mapping[str, str] = os.environ) -> list[str]:
    """One line per launcher variable that cannot describe this process's place in a job."""
    failures, values = [], {}
    for name, minimum in LAUNCH_INTEGERS:
        text = environ.get(name)
        if text is None or text == "":
            continue
        try:
            values[name] = int(text)
        except ValueError:
            failures.append(f"{name}={text}: must be an integer >= {minimum} (a launcher variable: unset it, or let "
                            "torchrun/srun set it)")
            continue
        if values[name] < minimum:
            failures.append(f"{name}={text}: must be >= {minimum}")
    if failures:
        return failures
    for rank, size in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if rank in values and size in values and values[rank] >= values[size]:
            failures.append(f"{rank}={values[rank]} must be below {size}={values[size]} (ranks count from 0)")
    if ("RANK" in environ) != ("WORLD_SIZE" in environ):
        present, absent = ("RANK", "WORLD_SIZE") if "RANK" in environ else ("WORLD_SIZE", "RANK")
        failures.append(f"{present} is set but {absent} is not: a launcher sets both; unset {present} to run as one "
                        f"process")
    if "MASTER_PORT" in values and values["MASTER_PORT"] > 65535:
        failures.append(f"MASTER_PORT={values['MASTER_PORT']}: must be a port number 1-65535")
    return failures


def stray_launch_variables(environ: Mapping[str, str] = os.environ) -> str:
    """A warning when RANK/WORLD_SIZE describe a job of several processes but no launcher set them (left over
    from an earlier torchrun session in this shell): this process would wait for peers that never come."""
    if not ("RANK" in environ and "WORLD_SIZE" in environ) or any(marker in environ for marker in LAUNCHER_MARKERS):
        return ""
    if _int(environ, "WORLD_SIZE", 1) <= 1:
        return ""
    return (f"RANK={environ['RANK']} WORLD_SIZE={environ['WORLD_SIZE']} are set, but no launcher (torchrun, srun, "
            f"mpirun) started this process: it is one rank of a {environ['WORLD_SIZE']}-process job and waits for "
            f"the others at {environ.get('MASTER_ADDR', '127.0.0.1')}:{environ.get('MASTER_PORT', 29500)} for up to "
            "launch.timeout_s; unset RANK WORLD_SIZE LOCAL_RANK to run alone")
