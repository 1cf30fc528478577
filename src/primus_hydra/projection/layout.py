"""The layout a projection is made for: the prepared split of the ranks (config/layout.py), as the backend applies it
(its adapter's traits, backends/traits.py)."""
from __future__ import annotations

from dataclasses import field, replace
from typing import Any, Optional

from primus_hydra.backends.base import adapter_class, adapter_class_named
from primus_hydra.backends.megatron.pipeline_layout import layout_stages, virtual_stages
from primus_hydra.backends.traits import BackendTraits
from primus_hydra.config.layout import ParallelLayout, shards_beside_tp, unchecked_parallel_layout
from primus_hydra.util.records import record

# World sizes beyond real clusters. The largest built for training hold about 200,000 accelerators (2025) and the
# step-time model (one ring per group, each device's share of its node's NICs, no congestion, no failures) was
# checked on nothing near that: above LARGE_WORLD a projection is made but comes with a warning (most often a
# typo: launch.nnodes=100000). Above MAX_WORLD it is refused: nothing that large exists, and the search's work
# (divisors of the node, the smallest-world hint's sizes) grows with it.
LARGE_WORLD = 1 << 18  # 262,144 ranks
MAX_WORLD = 1 << 20  # 1,048,576 ranks


@record(frozen=True)
class Layout:
    backend: str
    world: int
    nproc_per_node: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    micro_batch: int
    grad_accum: int
    vpp: int = 1  # model chunks per pipeline rank (interleaved schedule)
    fsdp: bool = False  # parameters, gradients and optimizer state sharded over dp (FSDP2, Megatron FSDP)
    distributed_optimizer: bool = False  # Megatron: optimizer state (and fp32 master weights) sharded over dp
    sequence_parallel: bool = False
    recompute: str = "none"  # none | selective | full
    precision: str = "bf16"  # fp32 | bf16 (module.precision)
    schedule: str = "1f1b"  # 1f1b | gpipe (native); Megatron: 1f1b, interleaved when vpp > 1
    flash_attention: bool = True  # attention scores are never stored (flash / memory-efficient SDPA, TE)
    first_stage_layers: Optional[int] = None
    last_stage_layers: Optional[int] = None
    pipeline_layout: Optional[str] = None  # Megatron's layout string (backend.pipeline_layout): any split, vpp its own
    # what the backend does (its adapter's); None: looked up by the backend's name
    traits: Optional[BackendTraits] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.traits is None:
            adapter = adapter_class_named(self.backend)
            if adapter is None:
                raise ValueError(f"backend={self.backend}: no backend has this name")
            object.__setattr__(self, "traits", adapter.traits)

    @property
    def etp(self) -> int:
        """Megatron's expert_tensor_parallel_size: tp for dense-style experts, 1 once experts are split over ep."""
        return self.tp if self.ep == 1 else 1

    def with_(self, **changes: Any) -> "Layout":
        return replace(self, **changes)


def projection_layout(cfg: Any, parallel: ParallelLayout, nproc_per_node: int, traits: BackendTraits) -> Layout:
    """The prepared split (config/layout.py) as the backend applies it (its traits and its backend.* knobs)."""
    p, m, backend = cfg.module.parallel, cfg.module, cfg.backend
    fsdp = shards_beside_tp(parallel) if traits.dp_shards_beside_tp else parallel.fsdp
    uneven = traits.uneven_pipeline_stages
    pipeline_layout = backend.get("pipeline_layout") if uneven else None
    vpp = int(backend.get("virtual_stages_per_pipeline_rank") or 1) if traits.interleaved_pipeline else 1
    if pipeline_layout is not None:
        vpp = virtual_stages(layout_stages(pipeline_layout), parallel.pp)
    return Layout(
        backend=str(backend.name), traits=traits, world=parallel.world_size, nproc_per_node=nproc_per_node,
        tp=parallel.tp, pp=parallel.pp, cp=parallel.cp, ep=parallel.ep, dp=parallel.dp,
        micro_batch=int(m.micro_batch_size), grad_accum=parallel.grad_accum,
        vpp=vpp,
        fsdp=fsdp, distributed_optimizer=traits.distributed_optimizer and bool(backend.get("use_distributed_optimizer"))
        and not fsdp, sequence_parallel=bool(p.sequence_parallel), recompute=traits.recompute_mode(backend),
        precision=str(m.precision), schedule=str(p.pp_schedule) if str(p.pp_schedule) in traits.pipeline_schedules
        else "1f1b", flash_attention=str(backend.get("transformer_impl")) != "local",
        first_stage_layers=backend.get("decoder_first_pipeline_num_layers") if uneven else None,
        last_stage_layers=backend.get("decoder_last_pipeline_num_layers") if uneven else None,
        pipeline_layout=None if pipeline_layout is None else str(pipeline_layout),
    )


def layout_from_config(cfg: Any, world: int, nproc_per_node: int) -> Layout:
    """projection_layout of this config's split of `world` ranks (checked or not), for the adapter backend._target_
    names."""
    return projection_layout(cfg, unchecked_parallel_layout(cfg, world), nproc_per_node, adapter_class(cfg).traits)
