"""Benchmark: host memory a rank needs to start from a Hugging Face folder, 1 process vs FSDP2 over 2 (issue 25).

A ~1 B-parameter Llama (hidden 2048, 16 layers, ffn 5632, GQA 16/8, vocab 32000; fp32, ~3.8 GB) is written once as
a Hugging Face folder (safetensors, 5 GB shards: write_hf_folder), its weights drawn on the meta-built native model.
Each case then starts the processes the trainer would: every rank builds the model on the meta device, shards it
(FSDP2 over the ranks), gives it storage and loads its own blocks from the folder (load_hf_into_native, as
module.checkpoint.load=<HF dir> does). A rank reports the growth of its peak RSS over its RSS before the model
existed; the baseline, measured in the same run, is the whole model loaded by one process. The goal: a rank of
fsdp=2 peaks at <= 0.6x the whole model's bytes.
Usage: .venv/bin/python scripts/bench/bench_hf_load_memory.py [--repeats 2] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = {"name": "bench_1b", "hidden_size": 2048, "num_layers": 16, "num_attention_heads": 16, "num_kv_heads": 8,
         "ffn_hidden_size": 5632, "vocab_size": 32000, "max_position_embeddings": 2048}
GIB = 1024.0 ** 3


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def model_config():
    from omegaconf import OmegaConf

    from primus_hydra.config.schema_model import ModelConfig

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), MODEL))


def write_folder(folder: Path) -> int:
    """The HF folder the cases load (fp32); the model's bytes."""
    import torch

    from primus_hydra.backends.common.hf_checkpoint import write_hf_folder
    from primus_hydra.backends.torch.model import build_model_on_meta, materialize

    model = materialize(build_model_on_meta(model_config()), torch.device("cpu"), seed=0)
    state = model.state_dict()
    write_hf_folder(state, model_config(), folder, dtype="fp32")
    return sum(tensor.numel() * tensor.element_size() for tensor in state.values())


def worker(folder: str) -> None:
    import torch

    from primus_hydra.backends.common.distributed import init_parallel_state
    from primus_hydra.backends.common.hf_checkpoint import load_hf_into_native
    from primus_hydra.backends.torch.model import build_model_on_meta
    from primus_hydra.backends.torch.parallelize import shard
    from primus_hydra.config.layout import ParallelLayout
    from primus_hydra.distributed_env import detect_distributed_env

    dist_env = detect_distributed_env()
    world = dist_env.world_size
    layout = ParallelLayout(world_size=world, tp=1, pp=1, cp=1, ep=1, dp=world, grad_accum=1, fsdp=world > 1)
    state = init_parallel_state(layout, torch.device("cpu"), dist_env, timeout_s=600)
    before = rss_bytes()
    model = shard(build_model_on_meta(model_config()), state)
    model.to_empty(device="cpu")
    load_hf_into_native(Path(folder), model)
    held = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"world": world, "rank": dist_env.rank, "peak_growth_gib": (peak - before) / GIB,
                      "held_gib": held * 4 / GIB}), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


def measure(folder: Path, processes: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--worker", str(folder)]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   __file__, "--worker", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=1200)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    scratch = Path(tempfile.mkdtemp(prefix="bench_hf_load_memory_", dir=args.dir))
    try:
        folder = scratch / "hf_1b"
        model_bytes = write_folder(folder)
        print(f"wrote {folder}: {model_bytes / GIB:.2f} GiB of fp32 weights", file=sys.stderr)
        peaks: dict = {1: [], 2: []}
        held: dict = {}
        for round_index in range(args.repeats):
            for processes in peaks:
                ranks = measure(folder, processes)
                peaks[processes].append(max(r["peak_growth_gib"] for r in ranks))
                held[processes] = max(r["held_gib"] for r in ranks)
                print(f"round {round_index + 1}: x{processes}: peak growth {peaks[processes][-1]:.2f} GiB",
                      file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    whole = model_bytes / GIB
    one = statistics.median(peaks[1])
    print(f"| processes | weights held per rank (GiB) | peak RSS growth of a rank, median of {args.repeats} (GiB) | "
          f"vs the whole model's {whole:.2f} GiB | vs 1 process |")
    print("|---|---|---|---|---|")
    for processes, values in peaks.items():
        peak = statistics.median(values)
        print(f"| {processes} | {held[processes]:.2f} | {peak:.2f} | {peak / whole:.2f}x | {peak / one:.2f}x |")


if __name__ == "__main__":
    main()
