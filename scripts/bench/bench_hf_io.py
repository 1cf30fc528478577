"""Benchmark: Hugging Face weights out of and into the native model, against transformers' own save and load.

A Llama of ~160M parameters (hidden 768, 12 layers, ffn 3072, vocab 32000; fp32, 0.65 GB) is built by transformers
under a fixed seed; rounds alternate the ways below, median and best over rounds, each into a fresh folder:
  export  transformers   model.save_pretrained(dir) from the model in memory
  export  native         write_hf_folder(native state in memory, ...) (backends/common/hf_checkpoint.py): the
                         same folder layout, shards of 5 GB
  load    transformers   AutoModelForCausalLM.from_pretrained(dir) (fp32)
  load    native         the native model built on the meta device, to_empty on the CPU, load_hf_into_native(dir)
  ... + read             the same, then every weight summed once: transformers 5 leaves its weights memory-mapped
                         (nothing is read until used), the native load copies them into the model's own storage
                         (which a sharded layout and the optimizer need); summing makes both pay for the bytes
Exports alternate which one writes first; every timing starts after os.sync(). Throughput is the weights' bytes per second. --dir picks the filesystem (default: a temp folder under /tmp).
Usage: .venv/bin/python scripts/bench/bench_hf_io.py [--rounds 3] [--dir /tmp] [--hidden 768 --layers 12]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers

from primus_hydra.backends.common.hf_checkpoint import load_hf_into_native, read_hf_as_native, write_hf_folder
from primus_hydra.backends.torch.model import build_model_on_meta
from primus_hydra.tasks.checkpoint_source import find_checkpoint_source


def timed(action) -> float:
    os.sync()  # the previous step's dirty pages are written first, not during this one
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_hf_io_", dir=args.dir))
    try:
        run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, args) -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                                      num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                                      num_key_value_heads=args.hidden // 64, max_position_embeddings=2048)
    reference = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    reference.save_pretrained(root / "source")
    source = find_checkpoint_source(str(root / "source"), "bench")
    native_state = read_hf_as_native(root / "source", source.model)
    native_state = {name: tensor.clone() for name, tensor in native_state.items()}  # in memory, as after training
    gigabytes = sum(t.numel() * t.element_size() for t in native_state.values()) / 1e9
    print(f"model: {sum(t.numel() for t in native_state.values()) / 1e6:.0f}M parameters, {gigabytes:.2f} GB fp32")

    def load_native():
        model = build_model_on_meta(source.model)
        model.to_empty(device="cpu")
        load_hf_into_native(root / "source", model)
        return model

    def load_transformers():
        return transformers.AutoModelForCausalLM.from_pretrained(root / "source", dtype=torch.float32)

    def read_all(model):
        with torch.no_grad():
            return sum(float(p.sum()) for p in model.parameters())

    times: dict[str, list[float]] = {key: [] for key in ("export transformers", "export native", "load transformers",
                                                          "load native", "load+read transformers", "load+read native")}
    exports = {"export transformers": lambda out: reference.save_pretrained(out),
               "export native": lambda out: write_hf_folder(native_state, source.model, out, dtype="fp32")}
    for number in range(args.rounds):
        # alternate who writes first: the second writer of a round also waits for the first one's dirty pages
        for key in sorted(exports, reverse=bool(number % 2)):
            out = root / f"out_{number}_{key.split()[-1]}"
            times[key].append(timed(lambda write=exports[key], out=out: write(out)))
            shutil.rmtree(out)
        times["load transformers"].append(timed(load_transformers))
        times["load native"].append(timed(load_native))
        times["load+read transformers"].append(timed(lambda: read_all(load_transformers())))
        times["load+read native"].append(timed(lambda: read_all(load_native())))
    for key, values in times.items():
        median = statistics.median(values)
        print(f"{key:22s} median {median:5.2f} s {gigabytes / median:6.2f} GB/s, best {min(values):5.2f} s "
              f"{gigabytes / min(values):6.2f} GB/s  (rounds: {', '.join(f'{v:.2f}' for v in values)})")
    for kind in ("export", "load", "load+read"):
        theirs, ours = times[f"{kind} transformers"], times[f"{kind} native"]
        print(f"{kind}: native throughput = {statistics.median(theirs) / statistics.median(ours):.2f}x transformers' "
              f"(median), {min(theirs) / min(ours):.2f}x (best)")


if __name__ == "__main__":
    main()
