"""Schemas of the run-level groups: platform, backend, task, launch, patches."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from primus_hydra.config.choices import AUTO, AutoInt, Choice


class Device(Choice):
    auto = "auto"  # a GPU when torch sees one, else the CPU
    cpu = "cpu"
    cuda = "cuda"  # ROCm builds of torch report as cuda


class RendezvousBackend(Choice):
    c10d = "c10d"  # restartable
    static = "static"  # fixed node ranks, no restarts


class LaunchMode(Choice):
    srun = "srun"  # one Slurm task per process (each a rank)
    torchrun = "torchrun"  # one Slurm task per node, running torch's elastic agent


class TransformerImpl(Choice):
    transformer_engine = "transformer_engine"
    local = "local"


class MegatronDataset(Choice):
    auto = "auto"  # megatron for text and indexed; native for mock and tokens (the same batches as every backend)
    megatron = "megatron"  # megatron.core.datasets: GPTDataset over indexed data (text built into one), MockGPTDataset
    native = "native"  # the project's own batches, index for index those of backend=torch


class TorchTitanJobFormat(Choice):
    auto = "auto"  # the installed torchtitan's: a config function for 0.3 and later, else TOML (and TOML without it)
    toml = "toml"  # torchtitan 0.2.x: a JobConfig file (--job.config_file)
    config_function = "config_function"  # torchtitan 0.3.x: a Python config function (--module ... --config ...)


class RecomputeMethod(Choice):
    uniform = "uniform"
    block = "block"


class RecomputeGranularity(Choice):
    full = "full"
    selective = "selective"


class ActivationCheckpoint(Choice):
    none = "none"
    selective = "selective"
    full = "full"
    memory_budget = "memory_budget"


class AttentionKernel(Choice):  # the choices listed in MaxText's base.yml
    autoselected = "autoselected"
    dot_product = "dot_product"
    flash = "flash"
    cudnn_flash_te = "cudnn_flash_te"


class RematPolicy(Choice):  # the choices listed in MaxText's base.yml (minimal_flash: newer MaxText, Primus's default)
    minimal_with_context = "minimal_with_context"
    minimal = "minimal"
    minimal_flash = "minimal_flash"
    save_dot_with_context_except_mlp = "save_dot_with_context_except_mlp"
    save_dot_except_mlpwi = "save_dot_except_mlpwi"
    save_dot_except_mlp = "save_dot_except_mlp"
    save_qkv_proj = "save_qkv_proj"
    qkv_proj_offloaded = "qkv_proj_offloaded"
    custom = "custom"
    minimal_offloaded = "minimal_offloaded"
    save_out_proj = "save_out_proj"
    full = "full"


class BenchmarkSuite(Choice):
    gemm = "gemm"  # matmul TFLOP/s over sizes and dtypes, and the configured model's layer shapes
    attention = "attention"  # SDPA backends at the model's attention shapes, forward and backward
    collectives = "collectives"  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send/recv


class Objective(Choice):
    auto = "auto"  # eval_loss when module.eval_interval evaluates, else mean_loss
    eval_loss = "eval_loss"  # the last evaluation's held-out loss
    mean_loss = "mean_loss"  # the mean of the last task.objective_window training losses
    loss = "loss"  # the last step's training loss: one mini-batch, noisy


class PeftMethod(Choice):
    lora = "lora"
    dora = "dora"


@dataclass
class PlatformConfig:
    name: str = MISSING
    env: Dict[str, str] = field(default_factory=dict)  # applied in each worker's runtime with setdefault semantics
    device: Device = Device.auto
    gpus_per_node: AutoInt = AUTO  # auto (detected) or an integer
    peak_tflops_per_device: Optional[float] = None  # dense bf16 peak for MFU; null: measured on CPU, unknown on GPU


@dataclass
class LaunchConfig:
    """How the job's processes start: torch's elastic agent, in the process that composed the config."""

    nproc_per_node: AutoInt = 1  # auto: visible GPUs, else 1 | an integer (>1 on CPU uses gloo)
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: AutoInt = AUTO  # auto: a free port | an integer
    rdzv_backend: RendezvousBackend = RendezvousBackend.c10d
    max_restarts: int = 0  # restart all workers after a failure this many times; they resume from the last checkpoint
    monitor_interval: float = 0.1  # seconds between the agent's health checks of its workers
    timeout_s: float = 600.0  # collective timeout: a stuck rank fails the job after this long
    shutdown_timeout_s: int = 30  # after a failure or signal: seconds from SIGTERM to SIGKILL (time for an on_signal checkpoint)
    allow_oversubscribe: bool = False  # start a job even when the orchestrator's memory estimate exceeds this node's
    # Slurm (platform=slurm / hydra/launcher=primus_slurm); the job's size and queue settings are hydra.launcher.*
    mode: LaunchMode = LaunchMode.srun
    wait: bool = True  # false: return right after submission, printing job ids and run dirs (see task=status)


@dataclass
class SweepConfig:
    """Multirun points on this machine (hydra/launcher=primus_local)."""

    max_parallel: AutoInt = AUTO  # auto: what the resource plan allows | an integer cap
    probe: bool = False  # run the first point alone for a few steps, measure its peak memory, tighten the plan
    probe_steps: int = 5


@dataclass
class TaskConfig:
    _target_: str = MISSING
    name: str = MISSING
    dry_run: bool = False  # stop after build_args and write the backend's final arguments to the run dir
    objective: Objective = Objective.auto  # task=train: the float a run returns (what Optuna and other sweepers optimize)
    objective_window: int = 10  # task.objective=mean_loss: how many of the last training losses are averaged
    runs: Optional[str] = None  # task=status: a run or sweep dir (null: every run under outputs/ and multirun/)
    source: Optional[str] = None  # task=import: a Primus experiment file, or a folder of them
    primus_root: Optional[str] = None  # task=import: the Primus checkout (null: the one that contains task.source)
    out: Optional[str] = None  # task=import: the Hydra config dir written (experiment/, model/)
    search: bool = False  # task=projection: rank every layout of the world size by projected tokens/s
    top: int = 10  # task=projection: how many ranked layouts task.search prints
    calibrate: bool = False  # task=projection: run a few real steps of the job and print measured next to projected
    calibrate_steps: int = 6  # task=projection: steps of the calibration run (the first two warm up)
    suite: Optional[BenchmarkSuite] = None  # task=benchmark: what to measure
    sizes: Optional[List[int]] = None  # task=benchmark: gemm M=N=K sizes, collective message bytes (null: the defaults)
    dtypes: Optional[List[str]] = None  # task=benchmark: fp32, bf16, fp16, fp8 (null: what the device runs)
    warmup: int = 3  # task=benchmark: untimed repetitions of each case
    iters: int = 10  # task=benchmark: timed repetitions (the median is reported)
    shared_dir: Optional[str] = None  # task=preflight: the folder every node must see (null: the run dir)
    processes_per_node: Optional[int] = None  # task=preflight: set from launch.nproc_per_node (preflight runs 1 per node)
    checkpoint_dir: Optional[str] = None  # task=preflight: set from module.checkpoint.dir (checked, not refused)


@dataclass
class PatchesConfig:
    enabled: str = "all"  # all | none | comma-separated patch ids (PRIMUS_PATCHES overrides when set)
    modules: List[str] = field(default_factory=list)  # extra modules that register patches (imported by the callback)


@dataclass
class BackendConfig:
    """Fields every backend option has; each backend extends it with its own typed knobs."""

    _target_: str = MISSING  # the BackendAdapter class
    name: str = MISSING
    path: Optional[str] = None  # source tree to put on sys.path (then $BACKEND_PATH, third_party/<dir>, cache)
    trainer: Optional[str] = None  # trainer class override; null: the adapter picks one by module.stage
    extra_args: Dict[str, Any] = field(default_factory=dict)  # native arguments passed through as they are


@dataclass
class TorchBackendConfig(BackendConfig):
    num_threads: Optional[int] = None  # torch intra-op threads; null: leave torch's default
    deterministic: bool = True  # torch.use_deterministic_algorithms on CPU
    # each rank's peak memory in metrics.jsonl (peak_memory_gib): CUDA's allocator statistics every step; on the
    # CPU the torch profiler's allocation events over set-up and the first two steps (which it slows)
    measure_memory: bool = False


@dataclass
class MegatronBackendConfig(BackendConfig):
    # auto: Megatron-LM's pretrain() when a checkout is found, else core | core: this project's loop on
    # megatron-core | megatron_lm: Megatron-LM's pretrain() | a trainer class path
    trainer: Optional[str] = "auto"
    # interleaved pipeline: model chunks per pipeline rank (Megatron's --num-virtual-stages-per-pipeline-rank)
    virtual_stages_per_pipeline_rank: Optional[int] = None
    # uneven pipeline stages: layers of the first / last stage (Megatron's --decoder-first/last-pipeline-num-layers);
    # the other stages split the rest evenly. null: every stage gets model.num_layers / pp
    decoder_first_pipeline_num_layers: Optional[int] = None
    decoder_last_pipeline_num_layers: Optional[int] = None
    # backend.trainer=core's batches: auto | megatron (megatron.core.datasets) | native (backend=torch's, for parity)
    dataset: MegatronDataset = MegatronDataset.auto
    transformer_impl: TransformerImpl = TransformerImpl.transformer_engine
    use_distributed_optimizer: bool = True
    recompute_granularity: Optional[RecomputeGranularity] = None
    # full recompute: Megatron's --recompute-method and --recompute-num-layers (null: uniform, 1 layer per unit)
    recompute_method: Optional[RecomputeMethod] = None
    recompute_num_layers: Optional[int] = None
    tokenizer_type: str = "HuggingFaceTokenizer"
    tokenizer_model: Optional[str] = None


@dataclass
class TorchTitanBackendConfig(BackendConfig):
    flavor: Optional[str] = None  # torchtitan model flavor name; null: derived from the model preset
    compile: bool = False
    activation_checkpoint: ActivationCheckpoint = ActivationCheckpoint.selective
    tokenizer_path: Optional[str] = None
    job_format: TorchTitanJobFormat = TorchTitanJobFormat.auto  # what task.dry_run=true writes for torchtitan


@dataclass
class MaxTextBackendConfig(BackendConfig):
    model_name: Optional[str] = None  # MaxText model name; null: derived from the model preset
    attention: AttentionKernel = AttentionKernel.dot_product
    remat_policy: RematPolicy = RematPolicy.full


@dataclass
class MegatronBridgeBackendConfig(BackendConfig):
    recipe: Optional[str] = None  # Megatron-Bridge recipe name; null: derived from the model preset
    hf_model_id: Optional[str] = None
    peft: Optional[PeftMethod] = None


@dataclass
class HummingbirdXTBackendConfig(BackendConfig):
    model_name_or_path: Optional[str] = None
