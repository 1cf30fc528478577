"""task.search=true: every layout of the world size, projected, ranked by tokens/s among those that fit.

Candidates: tp over the divisors of nproc_per_node that split the heads; cp (for sequences of 8k tokens and more)
that halves-divides the sequence; pp over the divisors of the layer count, with virtual stages where the
interleaved schedule applies, and powers of two with a lighter first stage where they do not divide (both where the
backend has them, e.g. megatron); ep over the divisors of the expert count; the data-parallel rest; micro batches
that divide the global batch; the backend's ways of sharding state (megatron: distributed optimizer or FSDP;
torch and torchtitan: DDP or FSDP2); and the least recompute that fits (recompute only ever slows a step).
What the backend runs comes from its adapter's traits (backends/traits.py): backend=torch gets no cp or ep and pp
only alone.
The cheap rules prune; the ranked layouts are then checked, best first, with the real run's validation
(orchestrator/prepare.py) until enough pass: the search never proposes a layout a run would refuse.
When none passes, smallest_fitting_world names the smallest world size at which this same search finds one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from primus_hydra.backends.traits import BackendTraits
from primus_hydra.projection.hardware import GIB, Hardware
from primus_hydra.projection.layout import MAX_WORLD, Layout
from primus_hydra.projection.memory import most_loaded_stage
from primus_hydra.projection.project import Projection, hardware_overhead, project, workload_of

LONG_SEQUENCE = 8192  # cp is searched from this sequence length on


def divisors(n: int, limit: Optional[int] = None) -> list[int]:
    """The divisors of n up to limit, ascending (pairs up to the square root: a node of 10^6 ranks costs 10^3 steps)."""
    small = [d for d in range(1, math.isqrt(max(0, n)) + 1) if n % d == 0]
    every = sorted(set(small + [n // d for d in small]))
    return [d for d in every if d <= (limit or n)]


def _state_choices(traits: BackendTraits, dp: int, pp: int, ep: int) -> list[dict]:
    if traits.distributed_optimizer:
        choices = [{"fsdp": False, "distributed_optimizer": True}]
        if dp > 1:
            choices.append({"fsdp": False, "distributed_optimizer": False})
        if dp > 1 and pp == 1 and ep == 1:
            choices.append({"fsdp": True, "distributed_optimizer": False})
        return choices
    return [{"fsdp": False, "distributed_optimizer": False}] + ([{"fsdp": True, "distributed_optimizer": False}] if dp > 1 else [])


def candidate_layouts(cfg: Any, base: Layout, world: int, *, require_batch_split: bool = True) -> Iterator[Layout]:
    """Layouts without their recompute choice (set to none); require_batch_split=False lets the global batch not
    divide (the fit-anywhere search)."""
    work = workload_of(cfg)
    model, gbs, seq = work.model, work.global_batch_size, work.seq_length
    traits = base.traits
    heads, kv = model.num_attention_heads, model.num_kv_heads
    for tp in divisors(base.nproc_per_node):
        if heads % tp or (not model.mla.enabled and kv % tp):
            continue
        for cp in _context_splits(traits, seq):
            if world % (tp * cp):
                continue
            for pp, first in _pipeline_splits(traits, model.num_layers, world // (tp * cp)):
                if world % (tp * cp * pp):
                    continue
                dp = world // (tp * cp * pp)
                if traits.pipeline_alone and pp > 1 and (tp > 1 or dp > 1):
                    continue  # the adapter's rule: cheap to prune, costly to validate
                experts = model.moe.num_experts
                for ep in (divisors(experts) if experts and traits.expert_parallel else [1]):
                    if (world // pp) % ep:
                        continue
                    for mb in (1, 2, 4, 8, 16):
                        if require_batch_split and gbs % (mb * dp):
                            continue
                        grad_accum = max(1, gbs // (mb * dp))
                        for vpp in _virtual_stages(traits, model.num_layers, pp, grad_accum) if first is None else [1]:
                            for state in _state_choices(traits, dp, pp, ep):
                                yield base.with_(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, micro_batch=mb,
                                                 grad_accum=grad_accum, vpp=vpp, recompute="none",
                                                 sequence_parallel=traits.sequence_parallel_with_tp and tp > 1,
                                                 first_stage_layers=first, last_stage_layers=None,
                                                 pipeline_layout=None, **state)


def _context_splits(traits: BackendTraits, seq: int) -> list[int]:
    if not traits.context_parallel:
        return [1]
    return [c for c in (1, 2, 4, 8) if c == 1 or (seq >= LONG_SEQUENCE * c // 2 and seq % (2 * c) == 0)]


def _pipeline_splits(traits: BackendTraits, layers: int, most: int) -> list[tuple[int, Optional[int]]]:
    """(pp, layers of the first stage or None for even stages): the divisors of the layer count, and where stages
    may be uneven the powers of two that do not divide it, with a lighter first stage (it also holds the embedding)."""
    splits: list[tuple[int, Optional[int]]] = [(pp, None) for pp in divisors(layers, min(layers, most))]
    if traits.uneven_pipeline_stages:
        pp = 2
        while pp <= min(layers, most):
            per_stage = -(-layers // pp)
            first = layers - (pp - 1) * per_stage
            if layers % pp and first >= 1:
                splits.append((pp, first))
            pp *= 2
    return splits


def _virtual_stages(traits: BackendTraits, layers: int, pp: int, grad_accum: int) -> list[int]:
    if not traits.interleaved_pipeline or pp < 2 or grad_accum < pp:
        return [1]
    return [v for v in (1, 2, 4, 8) if layers % (pp * v) == 0]


@dataclass(frozen=True)
class Ranked:
    projection: Projection
    overrides: list[str]


def least_recompute_that_fits(cfg: Any, layout: Layout, hardware: Hardware) -> Optional[Projection]:
    fitting = least_fitting_recompute(workload_of(cfg), layout, hardware)
    return None if fitting is None else project(cfg, fitting, hardware)


def least_fitting_recompute(cfg: Any, layout: Layout, hardware: Hardware) -> Optional[Layout]:
    """The layout with the least recompute whose most loaded stage fits (Projection.fits, without the step time)."""
    work = workload_of(cfg)
    usable, overhead = hardware.usable_memory_gib * GIB, hardware_overhead(hardware)
    for recompute in layout.traits.searched_recompute:
        candidate = layout.with_(recompute=recompute)
        if most_loaded_stage(work.model, candidate, work.seq_length, overhead).total <= usable:
            return candidate
    return None


def overrides_for(layout: Layout, drops_pipeline_layout: bool = False) -> list[str]:
    """The command-line overrides that give this layout (`drops_pipeline_layout`: the configured
    backend.pipeline_layout, made for its own pp, is replaced by the layout's even or outer-stage split)."""
    out = [f"module.parallel.tp={layout.tp}", f"module.parallel.pp={layout.pp}", f"module.parallel.cp={layout.cp}",
           f"module.parallel.ep={layout.ep}", "module.parallel.dp=auto", f"module.micro_batch_size={layout.micro_batch}",
           f"module.parallel.sequence_parallel={str(layout.sequence_parallel).lower()}"]
    traits = layout.traits
    out.append(f"module.parallel.fsdp={str(layout.fsdp).lower()}")
    if traits.distributed_optimizer:
        out.append(f"backend.use_distributed_optimizer={str(layout.distributed_optimizer).lower()}")
    if traits.interleaved_pipeline:
        out.append(f"backend.virtual_stages_per_pipeline_rank={layout.vpp if layout.vpp > 1 else 'null'}")
    if traits.uneven_pipeline_stages:
        out.append(f"backend.decoder_first_pipeline_num_layers={layout.first_stage_layers or 'null'}")
    if drops_pipeline_layout:
        out.append("backend.pipeline_layout=null")
    if traits.search_sets_recompute:
        off = layout.recompute == "none"
        out.append(f"backend.{traits.recompute_key}={traits.recompute_off if off else layout.recompute}")
    return out


def search(cfg: Any, base: Layout, hardware: Hardware, *, top: int,
           rejects: Callable[[list[str]], list[str]]) -> tuple[list[Ranked], int, int]:
    """The `top` fastest layouts that fit and pass `rejects` (the real run's validation of an override list), with
    how many layouts were projected and how many fit."""
    cfg = workload_of(cfg)
    fitting: list[Projection] = []
    projected = 0
    for layout in candidate_layouts(cfg, base, base.world):
        projected += 1
        best = least_recompute_that_fits(cfg, layout, hardware)
        if best is not None:
            fitting.append(best)
    fitting.sort(key=lambda projection: -projection.tokens_per_s)
    ranked: list[Ranked] = []
    for projection in fitting:
        overrides = overrides_for(projection.layout, base.pipeline_layout is not None)
        if not rejects(overrides):
            ranked.append(Ranked(projection, overrides))
            if len(ranked) == top:
                break
    return ranked, projected, len(fitting)


def smallest_batch_split(cfg: Any, base: Layout) -> Optional[int]:
    """The fewest data-parallel ranks any layout of the world size has (at micro batch 1): the smallest global batch
    a layout can split; None when no layout exists at all."""
    cfg = workload_of(cfg)
    sizes = [layout.dp for layout in candidate_layouts(cfg, base, base.world, require_batch_split=False)]
    return min(sizes) if sizes else None


def smallest_fitting_world(cfg: Any, base: Layout, hardware: Hardware,
                           rejects_at: Callable[[list[str], int], list[str]], max_world: int = MAX_WORLD) -> Optional[int]:
    """The fewest ranks (whole nodes of nproc_per_node, other than base.world, up to max_world) at which `search`
    finds a layout: one that splits the global batch, fits, and passes `rejects_at(overrides, world)` (the real
    run's validation at that world size). The same test the search makes, so the world it names is one where a
    search then succeeds; None when there is no such world."""
    work = workload_of(cfg)
    for world in _batch_splitting_worlds(work, base, max_world):
        scaled = base.with_(world=world)
        for layout in candidate_layouts(work, scaled, world):
            fitting = least_fitting_recompute(work, layout, hardware)
            if fitting is not None and not rejects_at(overrides_for(fitting, base.pipeline_layout is not None), world):
                return world
    return None


def _batch_splitting_worlds(work: Any, base: Layout, max_world: int) -> list[int]:
    """Every world size tp x cp x pp x dp (dp dividing the global batch) that fills whole nodes, ascending: the
    only sizes at which candidate_layouts has a layout for this batch (tens of sizes, not every node count)."""
    model, nproc = work.model, base.nproc_per_node
    worlds = set()
    for tp in divisors(nproc):
        for cp in _context_splits(base.traits, work.seq_length):
            for pp, _ in _pipeline_splits(base.traits, model.num_layers, model.num_layers):
                for dp in divisors(work.global_batch_size):
                    world = tp * cp * pp * dp
                    if world % nproc == 0 and world <= max_world and world != base.world:
                        worlds.add(world)
    return sorted(worlds)
