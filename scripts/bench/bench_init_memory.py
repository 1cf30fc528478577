"""Benchmark: host memory that making the native model's weights costs one rank, 1 process vs FSDP2 over 2.

The model (~0.9 GB of fp32 weights: hidden 1024, 12 layers, vocab 32000) is made the way the trainer makes it
(backends/torch/trainer.py: built on the meta device, sharded, then each rank draws its own shards) and, as the
baseline measured in the same run, the way it was made before (the whole model materialized on every rank, then
sharded). Each rank reports the growth of its peak RSS over its RSS before the model existed (torch imported,
process group up). Usage: .venv/bin/python scripts/bench/bench_init_memory.py [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = {"name": "bench_0p9gb", "hidden_size": 1024, "num_layers": 12, "num_attention_heads": 16, "num_kv_heads": 16,
         "ffn_hidden_size": 2816, "vocab_size": 32000, "max_position_embeddings": 2048}
GIB = 1024.0 ** 3


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(mode: str) -> None:
    """One rank: make the model (`sharded`: meta -> shard -> weights; `whole_first`: weights -> shard)."""
    import torch
    from omegaconf import OmegaConf

    from primus_hydra.backends.common.distributed import init_parallel_state
    from primus_hydra.backends.torch.model import build_model_on_meta, materialize
    from primus_hydra.backends.torch.parallelize import shard
    from primus_hydra.config.layout import ParallelLayout
    from primus_hydra.config.schema_model import ModelConfig
    from primus_hydra.distributed_env import detect_distributed_env

    dist_env = detect_distributed_env()
    world = dist_env.world_size
    layout = ParallelLayout(world_size=world, tp=1, pp=1, cp=1, ep=1, dp=world, grad_accum=1, fsdp=world > 1)
    state = init_parallel_state(layout, torch.device("cpu"), dist_env, timeout_s=300)
    model_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), MODEL))
    before = rss_bytes()
    if mode == "sharded":
        model = materialize(shard(build_model_on_meta(model_cfg), state), torch.device("cpu"), seed=0)
    else:
        model = shard(materialize(build_model_on_meta(model_cfg), torch.device("cpu"), seed=0), state)
    held = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"mode": mode, "world": world, "rank": dist_env.rank, "peak_growth_gib": (peak - before) / GIB,
                      "held_gib": held * 4 / GIB}), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


def measure(mode: str, processes: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--worker", mode]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   __file__, "--worker", mode]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=900)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=["sharded", "whole_first"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    cases = [("sharded", 1), ("sharded", 2), ("whole_first", 2)]
    peaks: dict = {case: [] for case in cases}
    held: dict = {}
    for round_index in range(args.repeats):
        for mode, processes in cases:
            ranks = measure(mode, processes)
            peaks[(mode, processes)].append(max(r["peak_growth_gib"] for r in ranks))
            held[(mode, processes)] = max(r["held_gib"] for r in ranks)
            print(f"round {round_index + 1}: {mode} x{processes}: peak growth {peaks[(mode, processes)][-1]:.2f} GiB",
                  file=sys.stderr)
    one = statistics.median(peaks[("sharded", 1)])
    print(f"| how the weights are made | processes | weights held per rank (GiB) | peak RSS growth of a rank, "
          f"median of {args.repeats} (GiB) | vs 1 process |")
    print("|---|---|---|---|---|")
    names = {"sharded": "meta -> shard -> each rank its shards (now)", "whole_first": "whole model, then shard (before)"}
    for (mode, processes), values in peaks.items():
        print(f"| {names[mode]} | {processes} | {held[(mode, processes)]:.2f} | {statistics.median(values):.2f} | "
              f"{statistics.median(values) / one:.2f}x |")


if __name__ == "__main__":
    main()
