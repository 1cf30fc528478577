"""The training module schema (Primus's `modules.pre_trainer` / `post_trainer`), with Megatron-style names."""
from __future__ import annotations

from dataclasses import field
from typing import Optional

from omegaconf import MISSING

from primus_hydra.config.choices import AUTO, AutoInt, Choice, choice
from primus_hydra.util.records import record


class Stage(Choice):
    pretrain = "pretrain"
    sft = "sft"


class Precision(Choice):
    fp32 = "fp32"
    bf16 = "bf16"


class LrDecayStyle(Choice):
    cosine = "cosine"
    linear = "linear"
    constant = "constant"


class DataSource(Choice):
    mock = "mock"  # random tokens: throughput benchmarks, no files needed
    text = "text"  # byte-level tokens read from local text files (default: the Python stdlib's sources)
    tokens = "tokens"  # a pre-tokenized flat token file (numpy memmap, uint16 or uint32)
    indexed = "indexed"  # Megatron's indexed dataset: path is a <prefix> of .bin/.idx, or a blend "w1 p1 w2 p2"
    # SFT: path is task=prepare_data's task.out of task.format=chat|instruction|alpaca|squad (<path>_text_document and
    # <path>_loss_mask_document); one conversation per sequence, the loss over the mask's tokens only
    sft = "sft"


class TokenDtype(Choice):
    uint16 = "uint16"
    uint32 = "uint32"


# torch.distributed.pipelining's schedules; `1f1b` is not an identifier, hence the functional form
PipelineSchedule = choice("PipelineSchedule", "1f1b gpipe", __name__)


@record
class ParallelConfig:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: AutoInt = AUTO  # auto = world_size / (tp * pp * cp), or an explicit integer
    fsdp: bool = False
    sequence_parallel: bool = False
    pp_schedule: PipelineSchedule = PipelineSchedule["1f1b"]


@record
class CheckpointConfig:
    dir: Optional[str] = None  # null: <run_dir>/checkpoints
    interval: int = 0  # save every N steps; 0: only at the end of training
    save_final: bool = True
    resume: Optional[str] = None  # null: fresh run | auto: latest in dir if any | a checkpoint path
    load: Optional[str] = None  # initial weights only (fine-tuning), optimizer and step start fresh
    on_signal: bool = False  # SIGTERM/SIGINT: write a checkpoint at the end of the current step, then stop


@record
class DataConfig:
    source: DataSource = DataSource.text
    # text: a file or folder of text files (null: Python's stdlib); tokens: a file; indexed: a prefix or a blend;
    # sft: the task.out prefix of task=prepare_data task.format=chat|instruction|alpaca|squad
    path: Optional[str] = None
    token_dtype: TokenDtype = TokenDtype.uint16  # source=tokens: the file's integer type
    num_workers: AutoInt = AUTO  # DataLoader worker processes per rank: auto (the resource plan) | an integer >= 0
    # train,valid[,test] weights (Megatron's --split); with module.eval_interval set, the valid share of the data is
    # held out from training and evaluated on (the test share is not used); without evaluation, training reads all
    split: str = "98,2,0"
    # source=text: a Hugging Face tokenizer folder (tokenizer.json) tokenizes the text; null: byte-level (byte b is
    # token b)
    tokenizer: Optional[str] = None
    # source=sft: several conversations per sequence, back to back (attention still crosses their boundaries)
    packing: bool = False


class PeftMethod(Choice):
    lora = "lora"


@record
class PeftConfig:
    """Parameter-efficient fine-tuning: the base weights stay frozen, only the adapters train."""
    method: Optional[PeftMethod] = None  # null: every weight trains | lora: low-rank adapters beside the targets
    # LoRA's r (Megatron-Bridge's `dim`); 32 and alpha 32 are Bridge's defaults, which Primus's LoRA experiments use
    rank: int = 32
    alpha: float = 32.0  # the adapter's output is scaled by alpha / rank
    dropout: float = 0.0  # on the adapter's input
    # the linear layers that get an adapter, by megatron-core's names (Megatron-Bridge's and Primus's):
    # linear_qkv (attention q/k/v), linear_proj (attention output), linear_fc1 (MLP gate/up), linear_fc2 (MLP down)
    target_modules: list[str] = field(default_factory=lambda: ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"])


@record
class LogConfig:
    interval: int = 10  # steps between log lines (metrics.jsonl gets every step)
    tensorboard: bool = True
    progress_bar: bool = True
    plot: bool = True  # loss-curve PNG in the run dir at the end


@record
class ModuleConfig:
    name: str = MISSING  # pre_trainer | post_trainer
    stage: Stage = Stage.pretrain
    train_iters: int = MISSING
    exit_interval: Optional[int] = None  # stop early (after a checkpoint) at the first step divisible by this
    eval_interval: Optional[int] = None  # the held-out loss every N steps and after the last one; null: no evaluation
    eval_iters: int = 10  # held-out global batches per evaluation: the same batches at every evaluation
    micro_batch_size: int = MISSING
    global_batch_size: int = MISSING
    seq_length: int = MISSING
    lr: float = MISSING
    min_lr: float = 0.0
    warmup_iters: int = 0
    lr_decay_style: LrDecayStyle = LrDecayStyle.cosine
    lr_decay_iters: Optional[int] = None  # null: train_iters
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    clip_grad: float = 1.0  # 0: no clipping
    precision: Precision = Precision.fp32  # GPU recipes choose bf16
    compile: bool = False  # torch.compile the model (backend=torch; torchtitan's compile.enable); sizes Inductor's compile threads
    seed: int = 1234
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    data: DataConfig = field(default_factory=DataConfig)
    log: LogConfig = field(default_factory=LogConfig)
    peft: PeftConfig = field(default_factory=PeftConfig)
