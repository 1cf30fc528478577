"""The layout a projection is made for: the config's parallel knobs, read the way each backend applies them."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from primus_hydra.config.layout import data_parallel_size, gradient_accumulation

MEGATRON_LIKE = ("megatron", "megatron_bridge")
# World sizes beyond real clusters. The largest built for training hold about 200,000 accelerators (2025) and the
# step-time model (one ring per group, each device's share of its node's NICs, no congestion, no failures) was
# checked on nothing near that: above LARGE_WORLD a projection is made but comes with a warning (most often a
# typo: launch.nnodes=100000). Above MAX_WORLD it is refused: nothing that large exists, and the search's work
# (divisors of the node, the smallest-world hint's sizes) grows with it.
LARGE_WORLD = 1 << 18  # 262,144 ranks
MAX_WORLD = 1 << 20  # 1,048,576 ranks
VOCAB_PAD = {"megatron": 128, "megatron_bridge": 128}  # make_vocab_size_divisible_by


@dataclass(frozen=True)
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

    @property
    def etp(self) -> int:
        """Megatron's expert_tensor_parallel_size: tp for dense-style experts, 1 once experts are split over ep."""
        return self.tp if self.ep == 1 else 1

    def with_(self, **changes: Any) -> "Layout":
        return replace(self, **changes)


def recompute_of(cfg: Any) -> str:
    backend = cfg.backend
    if backend.name in MEGATRON_LIKE:
        return str(backend.get("recompute_granularity") or "none")
    if backend.name == "torchtitan":
        mode = str(backend.activation_checkpoint)
        return mode if mode in ("none", "selective", "full") else "selective"
    if backend.name == "maxtext":
        return "full" if str(backend.remat_policy) == "full" else "selective"
    return "none"  # backend=torch stores every activation


def layout_from_config(cfg: Any, world: int, nproc_per_node: int) -> Layout:
    p, m, backend = cfg.module.parallel, cfg.module, cfg.backend
    dp = data_parallel_size(p, world)
    name = str(backend.name)
    megatron = name in MEGATRON_LIKE
    fsdp = bool(p.fsdp)
    if name == "torch":  # FSDP2 over dp when asked for, or next to TP (a 2-D mesh: backends/torch/parallelize.py)
        fsdp = dp > 1 and (fsdp or p.tp > 1)
    vpp = int(backend.get("virtual_stages_per_pipeline_rank") or 1) if megatron else 1
    flash = not (megatron and str(backend.get("transformer_impl")) == "local")
    return Layout(
        backend=name, world=world, nproc_per_node=nproc_per_node, tp=int(p.tp), pp=int(p.pp), cp=int(p.cp),
        ep=int(p.ep), dp=dp, micro_batch=int(m.micro_batch_size), grad_accum=gradient_accumulation(m, dp), vpp=vpp,
        fsdp=fsdp, distributed_optimizer=megatron and bool(backend.get("use_distributed_optimizer")) and not fsdp,
        sequence_parallel=bool(p.sequence_parallel), recompute=recompute_of(cfg),
        precision=str(m.precision), schedule=str(p.pp_schedule) if name == "torch" else "1f1b", flash_attention=flash,
        first_stage_layers=backend.get("decoder_first_pipeline_num_layers") if megatron else None,
        last_stage_layers=backend.get("decoder_last_pipeline_num_layers") if megatron else None,
    )
