"""Benchmark: tokens/s of the runtime's training loop vs a minimal hand-written PyTorch loop, same run.

Same model (llama_tiny), same batch (8 x 256 tokens, random ids), same optimizer (AdamW, same settings); the
runtime goes through compose -> prepare -> PrimusRuntime -> TorchTrainer with metrics.jsonl and TensorBoard on.
Goal: runtime >= 0.97x the minimal loop. Rounds alternate between the two to spread machine noise.
Usage: .venv/bin/python scripts/bench/bench_trainer_overhead.py [--steps 40] [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from helpers.compose import compose_primus, run_job  # noqa: E402  (the same composition and preparation the CLI does)
from primus_hydra.backends.common.metrics import read_metrics  # noqa: E402
from primus_hydra.backends.torch.model import build_model_on_meta, materialize  # noqa: E402

BATCH, SEQ, WARMUP = 8, 256, 5


def overrides(steps: int) -> list[str]:
    return [f"module.train_iters={steps}", "module.warmup_iters=0", f"module.micro_batch_size={BATCH}",
            f"module.global_batch_size={BATCH}", f"module.seq_length={SEQ}", "module.data.source=mock",
            "module.checkpoint.interval=0", "module.checkpoint.save_final=false", "module.log.plot=false",
            "module.log.progress_bar=false", "platform.peak_tflops_per_device=1.0"]


def runtime_tokens_per_s(steps: int) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        run_job(compose_primus(*overrides(steps)), Path(run_dir))
        times = [r["step_time_s"] for r in read_metrics(Path(run_dir) / "metrics.jsonl")][WARMUP:]
    return BATCH * SEQ / statistics.median(times)


def minimal_tokens_per_s(steps: int) -> float:
    cfg = compose_primus(*overrides(steps))
    torch.manual_seed(0)
    model = materialize(build_model_on_meta(cfg.model), torch.device("cpu"), seed=0)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-3, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        window = torch.randint(0, cfg.model.vocab_size, (BATCH, SEQ + 1))
        optimizer.zero_grad(set_to_none=True)
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        optimizer.step()
        loss.item()
        times.append(time.perf_counter() - started)
    return BATCH * SEQ / statistics.median(times[WARMUP:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runtime, minimal = [], []
    for round_index in range(args.rounds):
        pair = [(runtime, runtime_tokens_per_s), (minimal, minimal_tokens_per_s)]
        for results, measure in (pair if round_index % 2 == 0 else pair[::-1]):
            results.append(measure(args.steps))
        print(f"round {round_index + 1}: runtime {runtime[-1]:,.0f} tok/s, minimal {minimal[-1]:,.0f} tok/s", file=sys.stderr)
    ratio = statistics.median(runtime) / statistics.median(minimal)
    print(f"| loop | median tokens/s ({args.rounds} rounds x {args.steps} steps) |")
    print("|---|---|")
    print(f"| minimal hand-written loop | {statistics.median(minimal):,.0f} |")
    print(f"| primus_hydra runtime (TorchTrainer) | {statistics.median(runtime):,.0f} |")
    print(f"\nratio runtime / minimal: {ratio:.3f} (goal >= 0.97) -> {'MET' if ratio >= 0.97 else 'MISSED'}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
