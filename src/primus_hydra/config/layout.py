"""How a job's ranks split: world size, data-parallel size and gradient accumulation, from the config and the
number of processes. The one place these are computed; a pure function, no probing (the orchestrator resolves
`launch.nproc_per_node=auto` first)."""
from __future__ import annotations

from typing import Any, Optional

from primus_hydra.config.choices import auto_int
from primus_hydra.errors import ConfigValidationError
from primus_hydra.util.records import record


@record(frozen=True)
class ParallelLayout:
    """world_size = tp * pp * cp * dp; a global batch = micro_batch_size * dp * grad_accum."""

    world_size: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    grad_accum: int  # micro-batches per optimizer step on one data-parallel rank
    fsdp: bool


def data_parallel_size(parallel: Any, world_size: int) -> int:
    """module.parallel.dp: an explicit integer, or auto = world_size / (tp * pp * cp)."""
    explicit = auto_int(parallel.dp)
    return explicit if explicit is not None else world_size // (parallel.tp * parallel.pp * parallel.cp)


def gradient_accumulation(module: Any, dp: int) -> int:
    """Micro-batches per optimizer step on one data-parallel rank: global / (micro x dp)."""
    return max(1, module.global_batch_size // (module.micro_batch_size * max(1, dp)))


def stage_layers(num_layers: int, pp: int, first: Optional[int] = None, last: Optional[int] = None) -> list[int]:
    """Layers per pipeline stage: `first`/`last` fix the outer stages (Megatron's decoder_first/last_pipeline_num_layers),
    the other stages split the rest evenly; ValueError when they cannot."""
    if pp == 1:
        if first is not None or last is not None:
            raise ValueError("uneven stages need module.parallel.pp >= 2")
        return [num_layers]
    fixed = [(0, first), (pp - 1, last)]
    middle = pp - sum(count is not None for _, count in fixed)
    rest = num_layers - sum(count or 0 for _, count in fixed)
    if any(count is not None and count < 1 for _, count in fixed) or rest < middle or (middle and rest % middle) \
            or (not middle and rest):
        raise ValueError(f"{num_layers} layers do not split over {pp} stages with first={first}, last={last}")
    stages = [rest // middle if middle else 0] * pp
    for index, count in fixed:
        if count is not None:
            stages[index] = count
    return stages


def configured_world_size(cfg: Any, nproc_per_node: Optional[int] = None) -> Optional[int]:
    """launch.nnodes x launch.nproc_per_node (or x `nproc_per_node`, the resolved `auto`), or None while it is
    `auto` and unresolved."""
    nproc = nproc_per_node if nproc_per_node is not None else auto_int(cfg.launch.nproc_per_node)
    return None if nproc is None else int(cfg.launch.nnodes) * nproc


def layout_failures(cfg: Any, world_size: int) -> list[str]:
    """What keeps this config from running on `world_size` processes: one line each (the first that fails, since
    the later rules build on it)."""
    p, m = cfg.module.parallel, cfg.module
    model_parallel = p.tp * p.pp * p.cp
    if world_size % model_parallel:
        return [f"world size {world_size} (launch.nnodes x launch.nproc_per_node) is not divisible by "
                f"tp*pp*cp = {p.tp}*{p.pp}*{p.cp} = {model_parallel}"]
    dp = data_parallel_size(p, world_size)
    if dp < 1 or dp * model_parallel != world_size:
        return [f"world size {world_size} != tp*pp*cp*dp = {p.tp}*{p.pp}*{p.cp}*{dp}; "
                f"set module.parallel.dp=auto or {world_size // model_parallel}"]
    if m.global_batch_size % (m.micro_batch_size * dp):
        return [f"module.global_batch_size={m.global_batch_size} is not divisible by "
                f"module.micro_batch_size*dp = {m.micro_batch_size}*{dp} = {m.micro_batch_size * dp}"]
    if p.ep > 1 and (world_size // p.pp) % p.ep:
        return [f"module.parallel.ep={p.ep} must divide the ranks of one pipeline stage (world/pp = {world_size // p.pp})"]
    return []


def parallel_layout(cfg: Any, world_size: int) -> ParallelLayout:
    """The layout of this config on `world_size` processes; ConfigValidationError when it does not fit."""
    failures = layout_failures(cfg, world_size)
    if failures:
        raise ConfigValidationError(failures)
    return unchecked_parallel_layout(cfg, world_size)


def unchecked_parallel_layout(cfg: Any, world_size: int) -> ParallelLayout:
    """The same split, also where it does not fit (a memory estimate, a search starting from a refused layout)."""
    p = cfg.module.parallel
    dp = data_parallel_size(p, world_size)
    return ParallelLayout(world_size=world_size, tp=int(p.tp), pp=int(p.pp), cp=int(p.cp), ep=int(p.ep), dp=dp,
                          grad_accum=gradient_accumulation(cfg.module, dp), fsdp=bool(p.fsdp))


def shards_beside_tp(layout: ParallelLayout) -> bool:
    """FSDP over dp where dp shards beside tp (BackendTraits.dp_shards_beside_tp; the native backend's
    parallelize.py): asked for (module.parallel.fsdp), or next to TP (FSDP2 on a 2-D mesh); dp = 1 has nothing to
    shard, and dp > 1 otherwise replicates (DDP)."""
    return layout.dp > 1 and (layout.fsdp or layout.tp > 1)
