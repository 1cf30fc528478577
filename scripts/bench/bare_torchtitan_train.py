"""Baseline for bench_torchtitan.py: torchtitan's own training entry (`torchtitan.train.main(Trainer)`, its own loop,
logging and metrics) under `torchrun --nproc_per_node 2`, on the job file backend=torchtitan writes and with what
that run also has: the torchtitan.* patches of this project (CPU device, FSDP/DDP reductions) and the same TrainSpec
(the project's batches, the preset's model args). Rank 0 prints one JSON line: the wall-clock end of every step.
Usage: torchrun --nproc_per_node 2 bare_torchtitan_train.py RUN_DIR STEPS"""
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
import torch  # noqa: E402

from helpers.compose import compose_primus  # noqa: E402
from primus_hydra.backends.torchtitan import patches  # noqa: E402
from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config  # noqa: E402
from primus_hydra.backends.torchtitan.byte_tokenizer import TOKENIZER_DIR, write_byte_tokenizer  # noqa: E402
from primus_hydra.backends.torchtitan.job_file import write_job_file  # noqa: E402
from primus_hydra.backends.torchtitan.trainer import register_train_spec  # noqa: E402
from primus_hydra.config.layout import parallel_layout  # noqa: E402

RUN_DIR, STEPS = Path(sys.argv[1]), int(sys.argv[2])
BATCH, MICRO, SEQ = 8, 4, 256
WORLD = int(os.environ["WORLD_SIZE"])

cfg = compose_primus("backend=torchtitan", "model=llama_tiny", "module.data.source=mock", f"launch.nproc_per_node={WORLD}",
                     "module.parallel.fsdp=true", f"module.train_iters={STEPS}", "module.warmup_iters=1",
                     f"module.micro_batch_size={MICRO}", f"module.global_batch_size={BATCH}", f"module.seq_length={SEQ}")
job_args = build_torchtitan_job_config(cfg, RUN_DIR, parallel_layout(cfg, WORLD))
for patch in (patches.device_type_cpu, patches.memory_monitor_cpu, patches.fsdp_sum_reduction_cpu,
              patches.ddp_sum_gradients, patches.peak_flops_cpu, patches.pg_timeouts_cpu):
    patch(None)
job_file = RUN_DIR / "job.toml"
if os.environ["RANK"] == "0":
    write_job_file(job_args, job_file)
    write_byte_tokenizer(RUN_DIR / TOKENIZER_DIR)
else:
    while not job_file.exists():
        time.sleep(0.05)
    time.sleep(0.2)

from torchtitan import train  # noqa: E402
from torchtitan.config import ConfigManager  # noqa: E402

step_ends: list[float] = []


class TimedTrainer(train.Trainer):
    def __init__(self, job_config):
        job_config.model.name = register_train_spec(cfg, job_args, job_config, torch.device("cpu"))
        super().__init__(job_config)

    def train_step(self, data_iterator):
        super().train_step(data_iterator)
        step_ends.append(time.time())


sys.argv = [sys.argv[0], "--job.config_file", str(job_file)]
ConfigManager.parse_args.__defaults__ = (sys.argv[1:],)
train.main(TimedTrainer)
if os.environ["RANK"] == "0":
    print(json.dumps({"step_ends": step_ends}))
