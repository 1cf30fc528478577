"""Each task's schema (conf/task/<name>.yaml), stored as schema/task/<name>: a key of another task (task.search=true
under task=train) fails at composition. The tasks that run a job as task=train does (benchmark, preflight) extend
its schema, as their classes extend TrainTask."""
from __future__ import annotations

from dataclasses import field
from typing import List, Optional

from omegaconf import MISSING

from primus_hydra.config.choices import Choice
from primus_hydra.config.schema_module import Precision
from primus_hydra.util.records import record


class BenchmarkSuite(Choice):
    gemm = "gemm"  # matmul TFLOP/s over sizes and dtypes, and the configured model's layer shapes
    attention = "attention"  # SDPA backends at the model's attention shapes, forward and backward
    collectives = "collectives"  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send/recv


class Objective(Choice):
    auto = "auto"  # eval_loss when module.eval_interval evaluates, else mean_loss
    eval_loss = "eval_loss"  # the last evaluation's held-out loss
    mean_loss = "mean_loss"  # the mean of the last task.objective_window training losses
    loss = "loss"  # the last step's training loss: one mini-batch, noisy


@record
class TaskConfig:
    """Fields every task option has (task=plan has no others)."""

    _target_: str = MISSING  # the task class
    name: str = MISSING


@record
class TrainTaskConfig(TaskConfig):
    dry_run: bool = False  # stop after build_args and write the backend's final arguments to the run dir
    objective: Objective = Objective.auto  # the float a run returns (what Optuna and other sweepers optimize)
    objective_window: int = 10  # task.objective=mean_loss: how many of the last training losses are averaged


class StatusFormat(Choice):
    table = "table"  # aligned columns for a terminal
    json = "json"  # one JSON list of runs on stdout


@record
class StatusTaskConfig(TaskConfig):
    runs: Optional[str] = None  # a run or sweep dir (null: every run under outputs/ and multirun/)
    format: StatusFormat = StatusFormat.table
    watch: bool = False  # print again every few seconds until interrupted


@record
class DiffTaskConfig(TaskConfig):
    a: Optional[str] = None  # a run dir
    b: Optional[str] = None  # the run dir compared with task.a


@record
class LogsTaskConfig(TaskConfig):
    run: Optional[str] = None  # a run dir, a sweep dir or a Slurm job id
    rank: Optional[int] = None  # that rank's log (null: the run's own log: primus.log, or the Slurm job's output)
    follow: bool = False  # keep printing what is appended until the run ends
    lines: int = 100  # how many of the last lines to print first


@record
class CancelTaskConfig(TaskConfig):
    run: Optional[str] = None  # a run dir, a sweep dir or a Slurm job id


@record
class ImportTaskConfig(TaskConfig):
    source: Optional[str] = None  # a Primus experiment file, or a folder of them
    primus_root: Optional[str] = None  # the Primus checkout (null: the one that contains task.source)
    out: Optional[str] = None  # the Hydra config dir written (experiment/, model/)
    # processes that check the experiments (each composed and validated) while the next files are read (null: one
    # per CPU this process may use, at most 4)
    workers: Optional[int] = None


@record
class ProjectionTaskConfig(TaskConfig):
    search: bool = False  # rank every layout of the world size by projected tokens/s
    top: int = 10  # how many ranked layouts task.search prints
    calibrate: bool = False  # run a few real steps of the job and print measured next to projected
    calibrate_steps: int = 6  # steps of the calibration run (the first two warm up)


@record
class BenchmarkTaskConfig(TrainTaskConfig):
    suite: Optional[BenchmarkSuite] = None  # what to measure
    sizes: Optional[List[int]] = None  # gemm M=N=K sizes, collective message bytes (null: the defaults)
    dtypes: Optional[List[str]] = None  # fp32, bf16, fp16, fp8 (null: what the device runs)
    warmup: int = 3  # untimed repetitions of each case
    iters: int = 10  # timed repetitions (the median is reported)


@record
class PreflightTaskConfig(TrainTaskConfig):
    shared_dir: Optional[str] = None  # the folder every node must see (null: the run dir)
    processes_per_node: Optional[int] = None  # set from launch.nproc_per_node (preflight runs 1 per node)
    checkpoint_dir: Optional[str] = None  # set from module.checkpoint.dir (checked, not refused)


@record
class GenerateTaskConfig(TaskConfig):
    checkpoint: Optional[str] = None  # a run dir, a checkpoint step dir or a Hugging Face folder
    prompt: Optional[str] = None  # text, tokenized by the folder's tokenizer.json (else byte b is token b)
    prompt_tokens: Optional[List[int]] = None  # token ids, in place of task.prompt
    max_new_tokens: int = 32
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0  # sample only from the most likely tokens whose probabilities add up to top_p
    seed: int = 0  # the sampling generator's seed
    save_logits: bool = False  # generation.json also holds each generated position's logits
    dtype: Precision = Precision.fp32  # the weights' precision while generating


class ExportFormat(Choice):
    hf = "hf"  # a Hugging Face folder: transformers' AutoModelForCausalLM.from_pretrained loads it


@record
class ExportTaskConfig(TaskConfig):
    checkpoint: Optional[str] = None  # a run dir or a checkpoint step dir (any backend, any layout)
    format: ExportFormat = ExportFormat.hf
    out: Optional[str] = None  # the folder written; it must not exist
    dtype: Precision = Precision.bf16  # the precision of the written weights
    max_shard_size: str = "5GB"  # the largest safetensors file (a tensor larger than this is a file alone)


class PrepareDataFormat(Choice):
    auto = "auto"  # from each file's name: .jsonl/.json/.ndjson, .parquet, .arrow; a datasets.save_to_disk folder; else text
    text = "text"  # a whole file is one document
    jsonl = "jsonl"  # one JSON object a line, one document per line and key
    parquet = "parquet"  # Parquet files or a datasets.save_to_disk folder (Arrow), read with pyarrow
    chat = "chat"  # SFT: JSONL of {"messages": [{role, content}]}; <out>_text_document + <out>_loss_mask_document
    instruction = "instruction"  # SFT: JSONL of {"prompt", "response"}; the same two datasets
    alpaca = "alpaca"  # SFT: JSONL of Alpaca's {"instruction", "input" (optional), "output"}; the same two datasets
    squad = "squad"  # SFT: JSONL of SQuAD's {"context", "question", "answers": {"text": [...]}}; the same two datasets


class TokenDtype(Choice):
    auto = "auto"  # as Megatron-LM's tool picks: uint16 below 65500 ids, else int32
    uint16 = "uint16"
    int32 = "int32"


@record
class PrepareDataTaskConfig(TaskConfig):
    input: Optional[str] = None  # a file, a folder (walked in sorted order) or a glob; .gz and .zst read as they are
    tokenizer: Optional[str] = None  # byte, a Hugging Face tokenizer folder (tokenizer.json) or a sentencepiece .model
    out: Optional[str] = None  # the output prefix: <out>_<key>_document.bin/.idx and <out>_stats.json
    format: PrepareDataFormat = PrepareDataFormat.auto
    json_keys: List[str] = field(default_factory=lambda: ["text"])  # the fields read (jsonl, parquet); one dataset each
    append_eod: bool = True  # end each document with the tokenizer's end-of-document id
    workers: Optional[int] = None  # tokenizing processes (null: one per CPU core this process may use)
    token_dtype: TokenDtype = TokenDtype.auto  # the token ids' type in the .bin
    overwrite: bool = False  # replace existing outputs
    skip_bad_records: bool = False  # skip (and count) malformed JSONL lines instead of stopping at the first
    # each text cut into sentences by nltk's Punkt, a sequence each (<out>_<key>_sentence.bin/.idx), as Megatron-LM's
    # --split-sentences; lang: Punkt's data (tokenizers/punkt_tab/<lang>); keep_newlines: a sentence keeps the
    # whitespace after it
    split_sentences: bool = False
    lang: str = "english"
    keep_newlines: bool = False


TASK_SCHEMAS = {
    "train": TrainTaskConfig,
    "plan": TaskConfig,
    "status": StatusTaskConfig,
    "diff": DiffTaskConfig,
    "logs": LogsTaskConfig,
    "cancel": CancelTaskConfig,
    "import": ImportTaskConfig,
    "projection": ProjectionTaskConfig,
    "benchmark": BenchmarkTaskConfig,
    "preflight": PreflightTaskConfig,
    "prepare_data": PrepareDataTaskConfig,  # before export: its task.format row documents both
    "export": ExportTaskConfig,
    "generate": GenerateTaskConfig,
}
