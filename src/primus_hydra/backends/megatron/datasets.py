"""backend.trainer=core's batches: megatron.core.datasets, or the project's own (backend.dataset).

- megatron: megatron-core's GPTDataset through its BlendedMegatronDatasetBuilder, what Megatron-LM trains on:
  Megatron indexed datasets (module.data.source=indexed: one prefix or a weighted blend), the project's text source
  turned into an indexed dataset once per run dir with megatron-core's IndexedDatasetBuilder (each text file one
  document of the same byte tokens backend=torch reads), and MockGPTDataset for source=mock. Its index files
  (document, sample and shuffle orders) are cached in the run dir, never next to the user's data.
- native: TokenBatches, index for index the batches of backend=torch: cross-backend curves compare exactly.
- auto: megatron for text and indexed, native for mock (the same mock batches in every backend) and tokens (a flat
  token file has no documents).

Sample `step * global_batch_size + i` is sequence i of the step's global batch whatever the layout, so a resumed or
resharded run reads exactly the batches of an uninterrupted one.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

from primus_hydra.backends.common.data_sources import data_source_failures, default_text_corpus
from primus_hydra.errors import DataError

log = logging.getLogger("primus_hydra.megatron")

DATA_DIR = Path(".primus") / "megatron_data"  # under the run dir
TEXT_PREFIX = "text_bytes"


def dataset_kind(source: str, choice: str) -> str:
    """megatron or native: which batches the core trainer reads for module.data.source and backend.dataset."""
    if choice != "auto":
        return choice
    return "megatron" if source in ("text", "indexed") else "native"


def dataset_failures(cfg: Any) -> list[str]:
    """What the core trainer's data cannot do, in one line each, without torch or megatron-core."""
    data, backend = cfg.module.data, cfg.backend
    kind = dataset_kind(str(data.source), str(backend.dataset))
    if data.source == "sft" and kind == "megatron":
        return ["backend.dataset=megatron: module.data.source=sft is read by the native batches (its loss mask "
                "becomes the core trainer's loss_mask); set backend.dataset=native or auto"]
    if data.source == "tokens" and kind == "megatron":
        return ["backend.dataset=megatron: a flat token file (module.data.source=tokens) has no document boundaries "
                "for megatron.core.datasets; convert it with Megatron's tools/preprocess_data.py and use "
                "module.data.source=indexed, or set backend.dataset=native"]

    return data_source_failures(cfg, blends=kind == "megatron")


class MegatronBatches:
    """Micro-batches from a megatron.core.datasets dataset (tokens, labels, loss_mask, position_ids)."""

    def __init__(self, dataset: Any, global_batch_size: int, valid: Any = None):
        self.dataset, self.global_batch_size, self.valid = dataset, global_batch_size, valid

    def held_out(self) -> "MegatronBatches":
        """The validation split's batches (module.eval_interval), behind the same interface."""
        return MegatronBatches(self.valid, self.global_batch_size)

    def micro_batch(self, step: int, first_index: int, size: int) -> dict:
        import torch

        first = step * self.global_batch_size + first_index
        samples = [self.dataset[(first + offset) % len(self.dataset)] for offset in range(size)]
        return {key: torch.stack([sample[key] for sample in samples])
                for key in ("tokens", "labels", "loss_mask", "position_ids")}


class NativeBatches:
    """backend=torch's TokenBatches behind the same interface."""

    def __init__(self, batches: Any):
        self.batches = batches

    def micro_batch(self, step: int, first_index: int, size: int) -> dict:
        tokens, labels = self.batches.batch(step, first_index, size)
        if self.batches.masked:  # source=sft: the targets it leaves out become the core trainer's loss_mask
            from primus_hydra.backends.common.data import IGNORED

            return {"tokens": tokens, "labels": labels.clamp(min=0), "loss_mask": (labels != IGNORED).float()}
        return {"tokens": tokens, "labels": labels}

    def held_out(self) -> "NativeBatches":
        return NativeBatches(self.batches.held_out_batches())


def training_batches(cfg: Any, run_dir: Path, global_rank: int) -> Any:
    """The core trainer's batches for the whole run (MegatronBatches or NativeBatches); collective: call on every
    rank once the process group is up."""
    module, data = cfg.module, cfg.module.data
    kind = dataset_kind(str(data.source), str(cfg.backend.dataset))
    if kind == "native":
        from primus_hydra.backends.common.data import TokenBatches

        return NativeBatches(TokenBatches.for_module(module, cfg.model.vocab_size))
    blend: Optional[tuple[list[str], Optional[list[float]]]] = None
    if data.source == "text":
        blend = ([str(text_as_indexed_dataset(run_dir, data.path, global_rank, tokenizer=data.get("tokenizer")))], None)
    elif data.source == "indexed":
        from primus_hydra.backends.common.indexed_file import parse_blend

        parsed = parse_blend(str(data.path))
        weights = [weight for weight, _ in parsed]
        blend = ([str(Path(prefix).expanduser()) for _, prefix in parsed], None if weights[0] is None else weights)
    eval_samples = module.eval_iters * module.global_batch_size if module.eval_interval else 0
    train, valid = build_gpt_dataset(blend, cfg.model.vocab_size, module.seq_length, module.seed,
                                     module.train_iters * module.global_batch_size, run_dir / DATA_DIR / "cache",
                                     eval_samples=eval_samples, split=str(data.split))
    return MegatronBatches(train, module.global_batch_size, valid)


def build_gpt_dataset(blend: Optional[tuple], vocab_size: int, seq_length: int, seed: int, num_samples: int,
                      cache: Path, eval_samples: int = 0, split: str = "1,0,0") -> tuple[Any, Any]:
    """megatron-core's (train, valid) splits: at least num_samples training sequences, and eval_samples of the
    validation split (megatron-core's split of the documents by module.data.split); without evaluation all of the
    data trains (split 1,0,0) and valid is None. MockGPTDataset when blend is None. Rank 0 builds the index files
    first, the other ranks then read them (megatron-core's own order)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset

    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, blend=blend, split=split if eval_samples else "1,0,0",
        path_to_cache=str(cache), tokenizer=token_ids_tokenizer(vocab_size), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False)
    dataset_class = MockGPTDataset if blend is None else GPTDataset
    train, valid, _ = BlendedMegatronDatasetBuilder(dataset_class, [num_samples, eval_samples, 0], lambda: True,
                                                    config).build()
    source = "mock tokens" if blend is None else ", ".join(blend[0])
    if eval_samples and (valid is None or len(valid) == 0):
        raise DataError(f"module.data.split={split}: megatron-core's validation split of {source} holds no "
                        f"documents; give more documents or a larger valid share")
    log.info("data: megatron-core %s over %s, %d sequences of %d tokens%s", type(train).__name__, source, len(train),
             seq_length, f" (+{len(valid)} held out for evaluation)" if eval_samples else "")
    return train, valid


def token_ids_tokenizer(vocab_size: int) -> Any:
    """What megatron.core.datasets asks of a tokenizer when the data is already token ids: the vocabulary size, an
    end-of-document id (the last id: mock documents end with it; masks use it only with the reset_* options, off)
    and no pad id (megatron-core then masks nothing as padding)."""
    from megatron.core.tokenizers import MegatronTokenizerBase

    class TokenIds(MegatronTokenizerBase):
        def __init__(self) -> None:
            super().__init__(path="", config={})
            self.eod = vocab_size - 1
            # part of the description megatron-core hashes to name its cached index files
            self.unique_identifiers = {"class": "primus_hydra.TokenIds", "vocab_size": vocab_size}

        @property
        def vocab_size(self) -> int:
            return vocab_size

        def tokenize(self, text: str) -> list[int]:
            raise NotImplementedError("the data is token ids already")

        def detokenize(self, ids: list[int]) -> str:
            raise NotImplementedError("the data is token ids already")

        def vocab(self) -> dict:
            return {}

        def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("no chat template for token ids")

    return TokenIds()


def text_prefix(run_dir: Path) -> Path:
    return Path(run_dir) / DATA_DIR / TEXT_PREFIX


def text_as_indexed_dataset(run_dir: Path, path: Optional[str], global_rank: int, timeout_s: float = 1800,
                            tokenizer: Optional[str] = None) -> Path:
    """The text source as a Megatron indexed dataset in the run dir (its prefix), written once by rank 0 with
    megatron-core's IndexedDatasetBuilder: each text file one document of byte tokens, or of module.data.tokenizer's
    token ids. A later run in the same dir (a resume) reuses it while the text path and the tokenizer are the same. The other ranks wait for rank 0: at a barrier when the
    process group is up, else (Megatron-LM's pretrain() starts its own) until the dataset's stamp names this text."""
    import torch.distributed as dist

    prefix, source = text_prefix(run_dir), _text_source(path, tokenizer)
    if global_rank == 0:
        _write_text_dataset(prefix, path, source, tokenizer)
    if dist.is_initialized():
        dist.barrier()
    elif global_rank != 0:
        _wait_for_stamp(prefix, source, timeout_s)
    return prefix


def _text_source(path: Optional[str], tokenizer: Optional[str] = None) -> dict:
    source = {"path": str(Path(path).expanduser().resolve() if path else default_text_corpus())}
    return {**source, "tokenizer": str(Path(tokenizer).expanduser().resolve())} if tokenizer else source


def _stamp_names(prefix: Path, source: dict) -> bool:
    stamp = Path(f"{prefix}.json")
    try:
        return json.loads(stamp.read_text()) == source
    except (OSError, ValueError):
        return False


def _wait_for_stamp(prefix: Path, source: dict, timeout_s: float) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not _stamp_names(prefix, source):
        if time.monotonic() > deadline:
            raise DataError(f"module.data.source=text: rank 0 wrote no indexed dataset at {prefix} within "
                            f"{timeout_s:.0f} s (its log says why)")
        time.sleep(0.2)


def _write_text_dataset(prefix: Path, path: Optional[str], source: dict, tokenizer: Optional[str] = None) -> None:
    import numpy as np
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    from primus_hydra.backends.common.data import text_documents

    stamp = Path(f"{prefix}.json")
    if _stamp_names(prefix, source):
        log.info("data: text as an indexed dataset: reusing %s.bin/.idx", prefix)
        return
    prefix.parent.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)  # from here until the new stamp, the files are not vouched for
    documents = text_documents(path, tokenizer=tokenizer)
    partial = Path(f"{prefix}.partial-{os.getpid()}")
    builder = IndexedDatasetBuilder(f"{partial}.bin", dtype=np.int32 if tokenizer else np.uint16)
    for document in documents:
        builder.add_document(document, [len(document)])
    builder.finalize(f"{partial}.idx")
    for suffix in (".bin", ".idx"):  # whole files only: a crash leaves partials, never a half dataset
        os.replace(f"{partial}{suffix}", f"{prefix}{suffix}")
    partial_stamp = Path(f"{partial}.json")
    partial_stamp.write_text(json.dumps(source))
    os.replace(partial_stamp, stamp)  # the stamp last, whole: waiting ranks read a dataset that is complete
    log.info("data: text as an indexed dataset: %d documents, %d %s -> %s.bin/.idx", len(documents),
             sum(len(document) for document in documents), "tokens" if tokenizer else "byte tokens", prefix)
