"""A Hugging Face folder as the source of backend=megatron's first weights (`module.checkpoint.load=<HF dir>`).

`HfMegatronWeights` answers `load_full_weights` (sharded_weights.py) weight by weight under megatron-core names, and
reads for each rank only its share: its pipeline stage's layers, its expert-parallel experts, and of each weight
only the rows (or columns) of its tensor-parallel slice. The conversion is convert.py's weight table, applied to
the native tensors of hf_names.py's table: a fused weight (linear_qkv's query groups, linear_fc1's [gate; up]) is
first converted as row numbers, which tell which native rows the rank's slice is made of; only those are read.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from primus_hydra.backends.common.hf_checkpoint import (
    SAFETENSORS_DTYPES,
    HfReader,
    fill_native_block,
    hf_entries_by_native_name,
)
from primus_hydra.backends.common.hf_names import native_shape
from primus_hydra.backends.megatron.convert import Move, pad_vocabulary, weight_table
from primus_hydra.backends.megatron.sharded_weights import EXPERT_NAME, tensor_parallel_slice

_ROW_BITS = 32  # a row's origin as one number: (which native tensor of the move) << 32 | (its row + 1); 0 = padding


class HfMegatronWeights:
    """The model's weights under megatron-core names, read from an HF folder a rank's share at a time."""

    def __init__(self, folder: Path, model: Any, padded_vocab: int):
        self.model, self.padded_vocab = model, padded_vocab
        self.reader, self.native = HfReader(folder), hf_entries_by_native_name(folder, model)
        self.moves = {name: move for move in weight_table(model) for name in move.megatron
                      if not move.optional or move.native[0] in self.native}
        if model.tie_embeddings:  # a tied model's last pipeline stage keeps a copy of the embedding
            self.moves["output_layer.weight"] = self.moves["embedding.word_embeddings.weight"]

    def __enter__(self) -> "HfMegatronWeights":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.reader.close()

    def __contains__(self, name: str) -> bool:
        return name in self.moves

    def rank_share(self, name: str, param: torch.Tensor, local_name: str, rank: int, size: int,
                   glu: bool) -> torch.Tensor:
        """This rank's slice of weight `name` (the whole weight when it is not split), as `tensor_parallel_slice` cuts it."""
        move = self.moves[name]
        if EXPERT_NAME.search(name):  # one expert: its rows of the native stacks; fc1 = [gate; up], fc2 = down
            expert = move.megatron.index(name)
            whole = torch.cat([self._read(native, (expert,), 1)[0] for native in move.native])
            return tensor_parallel_slice(whole, param, local_name, rank, size, glu)
        origins = self._row_origins(move, name)
        if size == 1 or not getattr(param, "tensor_model_parallel", False):
            return self._rows(move, origins)
        if param.partition_dim == 0:  # the rows of its slice only
            return self._rows(move, tensor_parallel_slice(origins, param, local_name, rank, size, glu))
        if len(move.native) == 1:  # linear_proj, linear_fc2: a native weight's block of columns
            (native,) = move.native
            rows, columns = native_shape(self.native[native])
            width = columns // size
            return self._read(native, (0, rank * width), rows, (width,))
        return tensor_parallel_slice(self._rows(move, origins), param, local_name, rank, size, glu)

    def _row_origins(self, move: Move, name: str) -> torch.Tensor:
        """For each row of megatron weight `name`, the native row it is (_ROW_BITS), as a [rows, 1] column."""
        numbered = [(torch.arange(1, native_shape(self.native[native])[0] + 1, dtype=torch.float64)
                     + (index << _ROW_BITS)).unsqueeze(1) for index, native in enumerate(move.native)]
        origins = move.to_megatron(numbered)[move.megatron.index(name)]
        return pad_vocabulary({name: origins}, self.padded_vocab)[name]

    def _rows(self, move: Move, origins: torch.Tensor) -> torch.Tensor:
        """The rows `origins` names, read run by run of consecutive rows of one native tensor; zeros for padding."""
        codes = origins.reshape(-1).to(torch.int64).tolist()
        shape = native_shape(self.native[move.native[0]])
        out = torch.zeros(len(codes), *shape[1:], dtype=self._dtype(move.native[0]))
        start = 0
        while start < len(codes):
            end = start + 1
            while end < len(codes) and codes[end] == codes[end - 1] + 1 and codes[start] > 0:
                end += 1
            if codes[start] > 0:
                which, row = codes[start] >> _ROW_BITS, (codes[start] & ((1 << _ROW_BITS) - 1)) - 1
                native = move.native[which]
                fill_native_block(self.reader, self.native[native], (row,) + (0,) * (len(shape) - 1), out[start:end])
            start = end
        return out

    def _read(self, native: str, offset: tuple[int, ...], rows: int, inner: tuple[int, ...] = ()) -> torch.Tensor:
        """`rows` rows of native parameter `native` from `offset` (inner: the block's other sizes, else whole)."""
        shape = native_shape(self.native[native])
        block = (rows, *(inner or shape[len(offset):]))
        if len(offset) < len(shape):
            offset = offset + (0,) * (len(shape) - len(offset))
        out = torch.empty(block, dtype=self._dtype(native))
        fill_native_block(self.reader, self.native[native], offset, out)
        return out

    def _dtype(self, native: str) -> torch.dtype:
        return SAFETENSORS_DTYPES[self.reader.tensors[self.native[native][0].hf_name].dtype]
