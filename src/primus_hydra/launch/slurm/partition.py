"""Could the job ever start? Its shape and per-node request, compared with what the partition's nodes offer
(sinfo), before anything is written or queued: sbatch accepts a job that asks for more nodes, CPUs or GPUs than
the partition has, and it would wait in the queue forever (reason PartitionConfig).

Only a definite "no" refuses: when sinfo does not answer, sbatch decides as before."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Mapping, Optional

from primus_hydra.errors import ConfigValidationError
from primus_hydra.launch.slurm.cluster import SlurmNode, SlurmQueryError, partitions

if TYPE_CHECKING:
    from primus_hydra.launch.slurm.job_shape import SlurmJobShape


@functools.lru_cache(maxsize=1)
def _partitions_once() -> Optional[tuple[dict[str, list[SlurmNode]], Optional[str]]]:
    """One sinfo call per process (a sweep's points ask once); None when sinfo does not answer."""
    try:
        return partitions()
    except SlurmQueryError:
        return None


def check_fits_partition(shape: SlurmJobShape, settings: Mapping[str, Any]) -> None:
    """ConfigValidationError (one line) when no `shape.nodes` nodes of the partition could hold the job."""
    known = _partitions_once()
    if known is None:
        return
    nodes_by_partition, default = known
    name = settings.get("partition") or default
    if name is None:
        return
    if name not in nodes_by_partition:
        offered = ", ".join(sorted(nodes_by_partition)) or "none"
        raise ConfigValidationError([f"hydra.launcher.partition={name}: no such partition (sinfo lists: {offered}); "
                                     "choose one of those"])
    nodes = nodes_by_partition[name]
    where = f"partition {name}"
    need = per_node_request(shape, settings)
    limit = nodes[0].time_limit_min
    timeout = int(settings.get("timeout_min", 60))
    if limit is not None and timeout > limit:
        _refuse(f"hydra.launcher.timeout_min={timeout}: {where} allows at most {limit} min; lower it to {limit} or less")
    checks = (("cpus", "CPUs", need["cpus"], _cpus_key(shape, settings)),
              ("memory_mb", "MB of memory", need["memory_mb"], f"hydra.launcher.mem_gb={settings.get('mem_gb')}"),
              ("gpus", "GPUs", need["gpus"], f"hydra.launcher.gpus_per_node={shape.gpus_per_node}"))
    for field, unit, wanted, key in checks:
        most = max(getattr(node, field) for node in nodes)
        if wanted > most:
            _refuse(f"{key}: the job needs {wanted} {unit} per node, and no node of {where} has that many "
                    f"(the most is {most}, sinfo); ask for at most {most} or choose another hydra.launcher.partition")
    fitting = [node for node in nodes if node.cpus >= need["cpus"] and node.memory_mb >= need["memory_mb"]
               and node.gpus >= need["gpus"]]
    if shape.nodes > len(fitting):
        held = f"{len(fitting)} of its {len(nodes)} node(s)" if len(fitting) < len(nodes) else f"{len(nodes)} node(s)"
        _refuse(f"launch.nnodes={shape.nodes}: {where} has {held} that could hold this job's share (sinfo), so it "
                f"would wait in the queue forever; ask for at most {len(fitting)} node(s) or choose another "
                "hydra.launcher.partition")


def per_node_request(shape: SlurmJobShape, settings: Mapping[str, Any]) -> dict[str, int]:
    cpus_per_task = int(settings.get("cpus_per_task") or 1)
    return {"cpus": cpus_per_task * shape.tasks_per_node, "memory_mb": int(settings.get("mem_gb") or 0) * 1024,
            "gpus": int(shape.gpus_per_node or 0)}


def _cpus_key(shape: SlurmJobShape, settings: Mapping[str, Any]) -> str:
    return (f"hydra.launcher.cpus_per_task={settings.get('cpus_per_task') or 1} x {shape.tasks_per_node} task(s) "
            "per node")


def _refuse(line: str) -> None:
    raise ConfigValidationError([line])
