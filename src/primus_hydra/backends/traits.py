"""What a backend does that code outside its folder needs to know, declared by its adapter
(`traits = BackendTraits(...)` on the BackendAdapter subclass).

The projection's memory and step-time model, the layout search, the config rules, the resource plan and the
loading of another backend's checkpoint read these, never the backend's name: a new backend is one folder, and the
projection cannot disagree with the backend it models. Plain values: reading them imports neither torch nor the
backend's library.
"""
from __future__ import annotations

from typing import Optional

from primus_hydra.util.records import record

RECOMPUTE_MODES = ("none", "selective", "full")  # least recompute first
FP32_STATE_BYTES = (4, 4, 8)  # fp32 training: weights, gradients, two Adam moments (no master copy)


@record(frozen=True)
class BackendTraits:
    # -- the layouts it runs --------------------------------------------------------------------------------------
    context_parallel: bool = True  # module.parallel.cp > 1
    expert_parallel: bool = True  # module.parallel.ep > 1
    pipeline_alone: bool = False  # pp > 1 only with tp = 1 and dp = 1
    pipeline_schedules: tuple[str, ...] = ("1f1b",)  # module.parallel.pp_schedule values it runs; others run as 1f1b
    interleaved_pipeline: bool = False  # virtual stages per pipeline rank (backend.virtual_stages_per_pipeline_rank)
    uneven_pipeline_stages: bool = False  # a lighter first or last stage (backend.decoder_first/last_pipeline_num_layers)
    sequence_parallel_with_tp: bool = False  # task.search turns module.parallel.sequence_parallel on with tp > 1
    # FSDP over dp whenever tp > 1 too (FSDP2 beside TP on a 2-D mesh), not only when module.parallel.fsdp asks
    # (config/layout.py: shards_beside_tp); False: as module.parallel.fsdp says
    dp_shards_beside_tp: bool = False
    # Megatron's DistributedDataParallel and optimizer: gradients live in one contiguous buffer (no DDP bucket copy)
    # and the optimizer state shards over dp without FSDP (backend.use_distributed_optimizer); False: PyTorch's DDP
    # (a bucketed copy of the gradients) or FSDP2
    distributed_optimizer: bool = False

    # -- activation recompute -------------------------------------------------------------------------------------
    # backend.<recompute_key> says how much is recomputed: unset, none, selective or full as named, any other mode
    # (a policy of the library's) as selective. None: every activation is stored.
    recompute_key: Optional[str] = None
    recompute_off: str = "none"  # the value of recompute_key that turns recompute off, as an override writes it
    searched_recompute: tuple[str, ...] = ("none",)  # what task.search tries, least first (more than one: it sets them)

    # -- bytes ----------------------------------------------------------------------------------------------------
    vocab_pad_multiple: Optional[int] = None  # the vocabulary padded to a multiple of this x tp; None: not padded
    # bytes per parameter a rank holds under bf16 (weights, gradients, optimizer state); fp32 is FP32_STATE_BYTES
    bf16_state_bytes: tuple[int, int, int] = FP32_STATE_BYTES
    bf16_parameter_gathers: bool = True  # under bf16, parameters are gathered over dp in bf16 (else fp32)
    bf16_gradient_reduction: bool = False  # under bf16, gradients are reduced over dp in bf16 (else fp32)
    bf16_by_autocast: bool = False  # bf16 by autocast over fp32 weights: bf16 copies kept for backward
    # activations as the native model (backends/torch/model.py) keeps them (projection/activations.py: native_layer);
    # False: Megatron-Core's accounting (megatron_layer)
    native_activations: bool = False
    frees_gradients_between_steps: bool = False  # gradients set to None after each step

    # -- the run ----------------------------------------------------------------------------------------------------
    loader_processes: bool = True  # batches come from DataLoader worker processes (module.data.num_workers)
    shortens_long_warmup: bool = False  # warmup_iters > train_iters: its scheduler shortens the warmup to the run
    # "module.function": write_native_copy(step_dir, out, model_cfg) turns a checkpoint step of this backend into a
    # native weights folder (module.checkpoint.load with another backend); None: its steps are native already, or
    # no other backend loads them
    weight_converter: Optional[str] = None
    lora: bool = False  # module.peft.method=lora: low-rank adapters trained, the base weights frozen
    # Llama 4's MoE layers: dense and MoE layers interleaved (model.moe.interleave_step), the router's weight on the
    # expert's input (model.moe.score_before_experts)
    interleaved_moe: bool = False
    # gpt-oss's layers: attention sinks, sliding-window layers, biases on the attention output, the router and the
    # experts, the clamped SwiGLU (model.attention_sinks, sliding_window, attention_output_bias, swiglu_limit,
    # moe.router_bias, moe.experts_bias)
    gpt_oss_layers: bool = False
    # Gemma 4's layers (model.family=gemma4 with model.activation, final_logit_softcap, global_attention.*)
    gemma4_layers: bool = False

    def state_bytes(self, precision: str) -> tuple[int, int, int]:
        """Bytes per parameter a rank holds: weights, gradients, optimizer state."""
        return FP32_STATE_BYTES if precision == "fp32" else self.bf16_state_bytes

    @property
    def search_sets_recompute(self) -> bool:
        return self.recompute_key is not None and len(self.searched_recompute) > 1

    def recompute_mode(self, backend_cfg) -> str:
        """none, selective or full: what backend.<recompute_key> asks for."""
        value = backend_cfg.get(self.recompute_key) if self.recompute_key else None
        if value is None:
            return "none"
        return str(value) if str(value) in RECOMPUTE_MODES else "selective"
