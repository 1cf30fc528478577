"""How many nodes, tasks and GPUs a Slurm job asks for, from the composed config and the launcher settings.

srun mode: one Slurm task per process (per GPU); each task is a rank. torchrun mode: one task per node that
runs torch's elastic agent, which starts the node's processes. The launcher settings (hydra.launcher.*) win
where they are set; otherwise the shape follows launch.nnodes and launch.nproc_per_node.

A job that could never run well is refused here, before anything is written or queued: a time limit that is
not a positive number of minutes, a USR2 notice that would leave too little of each run to train in, and a
request the partition's nodes cannot hold (partition.py, from sinfo).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from omegaconf import DictConfig

from primus_hydra.config.choices import auto_int
from primus_hydra.config.schema_run import LaunchMode
from primus_hydra.errors import ConfigValidationError
from primus_hydra.launch.slurm.partition import check_fits_partition
from primus_hydra.orchestrator.resources import nproc_for

# the USR2 notice (checkpoint, then requeue) comes signal_delay_s before the time limit: at most this share of
# the limit, so that every run of a requeued job trains for at least as long as it spends on notice
MAX_SIGNAL_DELAY_SHARE = 0.5


@dataclass(frozen=True)
class SlurmJobShape:
    mode: LaunchMode
    nodes: int
    processes_per_node: int  # ranks per node
    gpus_per_node: Optional[int]

    @property
    def tasks_per_node(self) -> int:
        return self.processes_per_node if self.mode == "srun" else 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node


def job_shape(cfg: DictConfig, settings: Mapping[str, Any]) -> SlurmJobShape:
    """The job's shape, once its time limits are sound and the partition could hold it (ConfigValidationError)."""
    check_time_limits(settings)
    shape = _shape(cfg, settings)
    check_fits_partition(shape, settings)
    return shape


def check_time_limits(settings: Mapping[str, Any]) -> None:
    timeout = int(settings.get("timeout_min", 60))
    delay = int(settings.get("signal_delay_s", 120))
    requeues = int(settings.get("max_num_timeout", 3))
    if timeout <= 0:
        raise ConfigValidationError([
            f"hydra.launcher.timeout_min={timeout}: the job's time limit must be a positive number of minutes "
            "(Slurm would read 0 as no limit at all and a negative one as thousands of years); "
            "give the minutes the run needs, e.g. hydra.launcher.timeout_min=60"])
    if delay < 0:
        raise ConfigValidationError([f"hydra.launcher.signal_delay_s={delay}: must be 0 or more seconds"])
    if requeues < 0:
        raise ConfigValidationError([f"hydra.launcher.max_num_timeout={requeues}: must be 0 or more requeues"])
    most = int(timeout * 60 * MAX_SIGNAL_DELAY_SHARE)
    if delay > most:
        raise ConfigValidationError([
            f"hydra.launcher.signal_delay_s={delay}: the checkpoint-and-requeue notice would come {delay} s before "
            f"the end of a {timeout} min time limit, leaving each run (the first and each of the "
            f"max_num_timeout={requeues} requeues) less than half of it to train; set signal_delay_s to at most "
            f"{most} or hydra.launcher.timeout_min to at least {-(-delay * 2 // 60)}"])


def _shape(cfg: DictConfig, settings: Mapping[str, Any]) -> SlurmJobShape:
    mode = LaunchMode(cfg.launch.mode)
    gpus = settings.get("gpus_per_node")
    if gpus is None:
        gpus = auto_int(cfg.platform.gpus_per_node)
    nodes = settings.get("nodes") or int(cfg.launch.nnodes)
    # auto: one process per GPU the job asks for (unless platform.device=cpu), else one; as on a local node
    processes = nproc_for(cfg.launch.nproc_per_node, cfg.platform.device, gpus or 0)
    tasks = settings.get("tasks_per_node")
    if tasks is not None:
        expected = processes if mode == "srun" else 1
        if int(tasks) != expected:
            raise ConfigValidationError([
                f"hydra.launcher.tasks_per_node={tasks} disagrees with launch.mode={mode} and "
                f"launch.nproc_per_node={cfg.launch.nproc_per_node}: {mode} mode needs {expected} task(s) per node; "
                "leave hydra.launcher.tasks_per_node unset"
            ])
    if nodes != int(cfg.launch.nnodes):
        raise ConfigValidationError([
            f"hydra.launcher.nodes={nodes} disagrees with launch.nnodes={cfg.launch.nnodes}: set launch.nnodes only"
        ])
    return SlurmJobShape(mode=mode, nodes=int(nodes), processes_per_node=processes, gpus_per_node=gpus)


def executor_parameters(settings: Mapping[str, Any], shape: SlurmJobShape, job_name: str) -> dict[str, Any]:
    """submitit SlurmExecutor parameters (sbatch flags) for one job shape."""
    srun_args = list(settings.get("srun_args") or [])
    if not any(arg.startswith(("--kill-on-bad-exit", "-K")) for arg in srun_args):
        srun_args.insert(0, "--kill-on-bad-exit=1")  # one failed rank ends the step instead of hanging its peers
    parameters: dict[str, Any] = {
        "job_name": job_name,
        "nodes": shape.nodes,
        "ntasks_per_node": shape.tasks_per_node,
        "time": int(settings.get("timeout_min", 60)),
        "signal_delay_s": int(settings.get("signal_delay_s", 120)),
        "array_parallelism": int(settings.get("array_parallelism", 256)),
        "stderr_to_stdout": bool(settings.get("stderr_to_stdout", False)),
        "srun_args": srun_args,
        "setup": list(settings.get("setup") or []),
        "additional_parameters": dict(settings.get("additional_parameters") or {}),
    }
    if shape.gpus_per_node:
        parameters["gpus_per_node"] = shape.gpus_per_node
    if settings.get("mem_gb"):
        parameters["mem"] = f"{int(settings['mem_gb'])}GB"
    if settings.get("exclusive"):
        parameters["exclusive"] = True
    for key in ("cpus_per_task", "partition", "account", "qos", "constraint", "exclude", "comment"):
        if settings.get(key) is not None:
            parameters[key] = settings[key]
    if settings.get("python"):
        parameters["python"] = settings["python"]
    return parameters
