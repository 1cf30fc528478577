"""Benchmark: task=prepare_data's tokens/s with 1 and 2 workers, and (optionally) Megatron-LM's
tools/preprocess_data.py on the same input, tokenizer and workers, whose output must be the same bytes.

The corpus is generated: each document one source file of Python's standard library, as JSONL, repeated until
--mb MB. The tokenizer is a byte-level BPE of --vocab ids trained here with `tokenizers` on its first MB (eos
`</s>`). Each run is the command a user types, in a subprocess; `processing` tokens/s counts from the first document
to the renamed outputs (task=prepare_data's stats file; Megatron-LM: from its "Time to startup" line to its exit),
`wall` the whole command with its imports.
Usage: .venv/bin/python scripts/bench/bench_prepare_data.py [--mb 20] [--vocab 8000] [--workers 1 2]
           [--megatron-lm <a Megatron-LM checkout at core_v0.16.1>]
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path


def write_corpus(path: Path, megabytes: float) -> int:
    """JSONL of the standard library's sources, repeated to `megabytes`; returns the documents written."""
    sources = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    written, documents = 0, 0
    with path.open("w", encoding="utf-8") as handle:
        while written < megabytes * 1e6:
            for source in sources:
                line = json.dumps({"text": source.read_text(encoding="utf-8", errors="replace")}) + "\n"
                handle.write(line)
                written, documents = written + len(line), documents + 1
                if written >= megabytes * 1e6:
                    break
    return documents


def write_tokenizer(folder: Path, corpus: Path, vocab: int) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([corpus.read_text(encoding="utf-8")[: 1 << 20]], trainer)
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    return folder


def run_ours(corpus: Path, tokenizer: Path, out: Path, workers: int) -> dict:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "primus_hydra", "task=prepare_data", f"task.input={corpus}",
                    f"task.tokenizer={tokenizer}", f"task.out={out}", f"task.workers={workers}"], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    stats = json.loads(Path(f"{out}_stats.json").read_text())
    return {"tokens": stats["tokens"], "processing_s": stats["seconds"], "wall_s": wall}


def run_megatron_lm(checkout: Path, corpus: Path, tokenizer: Path, out: Path, workers: int, tokens: int) -> dict:
    command = [sys.executable, "-u", str(checkout / "tools" / "preprocess_data.py"), "--input", str(corpus),
               "--output-prefix", str(out), "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
               str(tokenizer), "--append-eod", "--workers", str(workers), "--log-interval", "100000000"]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    processing_started = None
    for line in process.stdout:
        if line.startswith("Time to startup"):
            processing_started = time.perf_counter()
    if process.wait() != 0 or processing_started is None:
        raise SystemExit(f"Megatron-LM's preprocess_data.py failed (exit {process.returncode})")
    ended = time.perf_counter()
    return {"tokens": tokens, "processing_s": ended - processing_started, "wall_s": ended - started}


def row(name: str, workers: int, result: dict) -> str:
    return (f"{name:<22} {workers:>7} {result['tokens']:>11} {result['tokens'] / result['processing_s']:>18,.0f} "
            f"{result['tokens'] / result['wall_s']:>12,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--megatron-lm", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        documents = write_corpus(root / "corpus.jsonl", args.mb)
        tokenizer = write_tokenizer(root / "tokenizer", root / "corpus.jsonl", args.vocab)
        print(f"corpus: {documents} documents, {args.mb:.0f} MB of JSONL; BPE tokenizer of {args.vocab} ids; "
              f"{os.cpu_count()} CPUs")
        print(f"{'command':<22} {'workers':>7} {'tokens':>11} {'processing tokens/s':>18} {'wall tokens/s':>12}")
        for workers in args.workers:
            ours = run_ours(root / "corpus.jsonl", tokenizer, root / f"ours{workers}", workers)
            print(row("task=prepare_data", workers, ours), flush=True)
            if args.megatron_lm is not None:
                theirs = run_megatron_lm(args.megatron_lm, root / "corpus.jsonl", tokenizer, root / f"mlm{workers}",
                                         workers, ours["tokens"])
                same = all(filecmp.cmp(f"{root}/ours{workers}_text_document{suffix}",
                                       f"{root}/mlm{workers}_text_document{suffix}", shallow=False)
                           for suffix in (".bin", ".idx"))
                print(row("Megatron-LM preprocess", workers, theirs) + f"   same bytes: {same}", flush=True)


if __name__ == "__main__":
    main()
