"""One projection: the config's layout on its world size, for one hardware entry, as the JSON task=projection prints."""
from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from primus_hydra.config import model_math
from primus_hydra.config.model_math import count_active_matmul_parameters
from primus_hydra.projection.hardware import GIB, Hardware
from primus_hydra.projection.layout import Layout
from primus_hydra.projection.memory import StageMemory, most_loaded_stage, stage_memory, stage_split
from primus_hydra.projection.step_time import StepTime, step_time
from primus_hydra.util.records import record


@record(frozen=True)
class Projection:
    layout: Layout
    hardware: Hardware
    parameters: int
    stage: StageMemory
    time: StepTime
    flops_per_step: float
    tokens_per_step: int

    @property
    def fits(self) -> bool:
        return self.stage.total <= self.hardware.usable_memory_gib * GIB

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.time.total if self.time.total > 0 else math.inf  # refused when printed

    @property
    def mfu(self) -> float:
        available = self.time.total * self.layout.world * self.hardware.peak_tflops * 1e12
        return self.flops_per_step / available if available > 0 else math.inf

    def to_dict(self) -> dict:
        layout = self.layout
        return {
            "backend": layout.backend,
            "hardware": {"name": self.hardware.name, "memory_gib": round(self.hardware.memory_gib, 2),
                         "peak_tflops": round(self.hardware.peak_tflops, 4), "peak_source": self.hardware.peak_source,
                         "op_overhead_us": round(self.hardware.op_overhead_us, 3),
                         "dtensor_op_overhead_us": round(self.hardware.dtensor_op_overhead_us, 3)},
            "layout": {"world_size": layout.world, "nproc_per_node": layout.nproc_per_node, "tp": layout.tp,
                       "pp": layout.pp, "vpp": layout.vpp, "cp": layout.cp, "ep": layout.ep, "dp": layout.dp,
                       "micro_batch_size": layout.micro_batch, "grad_accum": layout.grad_accum, "fsdp": layout.fsdp,
                       "distributed_optimizer": layout.distributed_optimizer,
                       "sequence_parallel": layout.sequence_parallel, "recompute": layout.recompute,
                       "precision": layout.precision, "first_stage_layers": layout.first_stage_layers,
                       "last_stage_layers": layout.last_stage_layers, "pipeline_layout": layout.pipeline_layout},
            "parameters": self.parameters,
            "parameters_per_gpu": int(round(self.stage.parameters.total)),
            "most_loaded_stage": self.stage.stage,
            "memory_gib": {key: round(value, 4) for key, value in self.stage.gib().items()},
            "fits": self.fits,
            "usable_memory_gib": round(self.hardware.usable_memory_gib, 2),
            "memory_margin": self.hardware.usable_memory_fraction,
            "flops_per_step": self.flops_per_step,
            "recompute_flops_per_step": self.time.recompute_flops * layout.world / layout.pp,
            "step_time_s": _rounded(self.time.as_dict()),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "mfu": round(self.mfu, 4),
        }


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return float(f"{value:.6g}")


@record(frozen=True)
class Workload:
    """What a projection reads of a config, as plain values (OmegaConf's attribute access would dominate a search)."""

    model: Any  # the model preset as its schema dataclass
    seq_length: int
    global_batch_size: int


def workload_of(cfg: Any) -> Workload:
    if isinstance(cfg, Workload):
        return cfg
    model = OmegaConf.to_object(cfg.model) if isinstance(cfg.model, DictConfig) else cfg.model
    return Workload(model, int(cfg.module.seq_length), int(cfg.module.global_batch_size))


def project(cfg: Any, layout: Layout, hardware: Hardware) -> Projection:
    """cfg: the composed config, or its Workload."""
    work = workload_of(cfg)
    model, seq = work.model, work.seq_length
    overhead = hardware_overhead(hardware)
    stage = most_loaded_stage(model, layout, seq, overhead)
    slowest = max(range(layout.pp), key=lambda index: _stage_cost(model, layout, index))
    time_stage = stage if slowest == stage.stage else _stage_memory(model, layout, seq, slowest, overhead)
    time = step_time(model, layout, seq, time_stage, stage_split(model, layout)[slowest], hardware)
    tokens = work.global_batch_size * seq
    flops = model_math.training_flops_per_token(model, seq) * tokens
    return Projection(layout, hardware, model_math.count_parameters(model), stage, time, flops, tokens)


def hardware_overhead(hardware: Hardware) -> float:
    return hardware.runtime_overhead_gib * GIB


def _stage_cost(model: Any, layout: Layout, stage: int) -> float:
    """Layers on the stage, the output layer counted as layers' worth of its FLOPs: picks the slowest stage."""
    layers = len(stage_split(model, layout)[stage])
    per_layer = max(1.0, (count_active_matmul_parameters(model) - model.vocab_size * model.hidden_size) / model.num_layers)
    return layers + (model.vocab_size * model.hidden_size / per_layer if stage == layout.pp - 1 else 0.0)


def _stage_memory(model: Any, layout: Layout, seq: int, stage: int, overhead: float) -> StageMemory:
    return stage_memory(model, layout, seq, stage, stage_split(model, layout)[stage], overhead)
