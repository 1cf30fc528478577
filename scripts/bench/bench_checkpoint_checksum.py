"""Benchmark: what the per-file checksums of checkpoints cost, saving and loading, against plain DCP in the same run.

A ~300 MB training state (6 x Linear(2048, 2048) with AdamW moments: 25M parameters x 3 x 4 bytes) is saved and
loaded in one process, in rounds that alternate the ways below, median over rounds:
  save  plain DCP        dcp.save into a folder (what a save cost without checksums, its fsyncs included)
  save  checksummed      CheckpointManager.save: dcp.save hashing every byte as it is written (xxh3_64),
                         trainer_state.pt and meta.json, the rename and `latest` (backends/common/checkpoint.py)
  save  read back        dcp.save, then every file read back and hashed, with xxh3_64 and with zlib's crc32
                         (the alternative to hashing while writing, and the algorithm without xxhash)
  load  plain DCP        dcp.load into the same state dict
  load  verified         CheckpointManager.find (every file's size and checksum checked) + CheckpointManager.load
Also the raw speed of each algorithm on 256 MiB in memory. --dir picks the filesystem (default: a temp folder
under /tmp, the machine's disk; /dev/shm shows the CPU cost alone).
Usage: .venv/bin/python scripts/bench/bench_checkpoint_checksum.py [--rounds 5] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from primus_hydra.backends.common.checkpoint import CheckpointManager
from primus_hydra.backends.common.checkpoint_paths import ALGORITHMS, Hasher, file_checksum

LAYERS, WIDTH = 6, 2048


def training_state() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(4, WIDTH)).sum().backward()
    optimizer.step()
    return model, optimizer


def state_dict(model, optimizer) -> dict:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def plain_save(root: Path, model, optimizer) -> float:
    started = time.perf_counter()
    dcp.save(state_dict(model, optimizer), checkpoint_id=str(root / "plain"), no_dist=True)
    return time.perf_counter() - started


def checksummed_save(root: Path, model, optimizer) -> float:
    started = time.perf_counter()
    CheckpointManager(root / "managed").save(1, model, optimizer, {"step": 1}, {"model": "bench"})
    return time.perf_counter() - started


def read_back_save(algorithm: str):
    def save(root: Path, model, optimizer) -> float:
        started = time.perf_counter()
        folder = root / f"read_back_{algorithm}"
        dcp.save(state_dict(model, optimizer), checkpoint_id=str(folder), no_dist=True)
        for file in sorted(folder.iterdir()):
            file_checksum(file, algorithm)
        return time.perf_counter() - started

    return save


def plain_load(root: Path, model, optimizer) -> float:
    state = state_dict(model, optimizer)
    started = time.perf_counter()
    dcp.load(state, checkpoint_id=str(root / "plain"), no_dist=True)
    return time.perf_counter() - started


def verified_load(root: Path, model, optimizer) -> float:
    manager = CheckpointManager(root / "managed")
    started = time.perf_counter()
    path, _ = manager.find("auto", "module.checkpoint.resume")
    manager.load(path, "module.checkpoint.resume", model, optimizer, "bench")
    return time.perf_counter() - started


def hash_gb_per_s(algorithm: str) -> float:
    data = os.urandom(256 << 20)
    best = min(_timed(lambda: Hasher(algorithm).update(data)) for _ in range(3))
    return len(data) / best / 1e9


def _timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    model, optimizer = training_state()
    saves = {"plain DCP": plain_save, "checksummed (xxh3_64 while written)": checksummed_save,
             "DCP, then read back + xxh3_64": read_back_save("xxh3_64"),
             "DCP, then read back + crc32": read_back_save("crc32")}
    loads = {"plain DCP": plain_load, "verified (sizes + xxh3_64, then DCP)": verified_load}
    times: dict[str, list[float]] = {f"save {k}": [] for k in saves} | {f"load {k}": [] for k in loads}
    size = 0
    for round_index in range(-1, args.rounds):  # round -1 warms up (imports, page cache, allocator): not counted
        root = Path(tempfile.mkdtemp(prefix="bench_ckpt_", dir=args.dir))
        try:
            order = list(saves.items()) if round_index % 2 == 0 else list(saves.items())[::-1]
            for name, save in order:
                times[f"save {name}"].append(save(root, model, optimizer))
            order = list(loads.items()) if round_index % 2 == 0 else list(loads.items())[::-1]
            for name, load in order:
                times[f"load {name}"].append(load(root, model, optimizer))
            size = sum(p.stat().st_size for p in (root / "plain").iterdir())
        finally:
            shutil.rmtree(root)
        if round_index < 0:
            times = {k: [] for k in times}
            continue
        print(f"round {round_index + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()), file=sys.stderr)
    median = {k: statistics.median(v) for k, v in times.items()}
    speeds = ", ".join(f"{name} {hash_gb_per_s(name):.1f} GB/s" for name in ALGORITHMS)
    print(f"state {size / 1e6:.0f} MB in {args.dir}; in memory: {speeds}; {args.rounds} rounds, median")
    print("| operation | median s | vs plain DCP |")
    print("|---|---|---|")
    for key, value in median.items():
        base = median["save plain DCP"] if key.startswith("save") else median["load plain DCP"]
        print(f"| {key} | {value:.3f} | {value / base:.2f}x |")


if __name__ == "__main__":
    main()
