"""Hugging Face weights in and out of the native model.

In: `load_hf_into_native` fills a built (possibly sharded) native model in place. Each rank reads only the
slices it holds, straight from the memory-mapped safetensors files (`safe_open(...).get_slice`): a DTensor's
local block (FSDP2, TP) by its offset in the full tensor, a pipeline stage only its own layers. A whole parameter
stored as it is in the file (unsharded, the same dtype and shape, no row mapping) becomes a private copy-on-write
mapping of the file's bytes (as transformers' own load leaves weights mapped): nothing is read until a weight is
used, processes on a node share the file's pages until they write theirs, and the file is never written.
Out: `write_hf_folder` writes a native state dict as an HF folder transformers loads: safetensors shards of a
bounded size, their index, config.json and generation_config.json (and a tokenizer's files), in a temporary
sibling folder renamed into place at the end.
Names, shapes and the two non-trivial mappings (stacked experts, DeepSeek's interleaved rope rows) are
hf_names.py's table; the folder's files and headers are hf_folder.py's.
"""
from __future__ import annotations

import json
import mmap
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from primus_hydra.backends.common.hf_folder import (
    INDEX,
    HfFolderError,
    check_hf_folder,
    folder_tensors,
    parse_size,
    read_config,
    rope_interleave_of,
)
from primus_hydra.backends.common.hf_names import HfTensor, by_native_name, hf_tensor_table, native_shape
from primus_hydra.backends.common.weights import shard_bounds
from primus_hydra.config.hf_config import hf_config_for
from primus_hydra.errors import CheckpointError

__all__ = ["HfReader", "check_hf_folder", "load_hf_into_native", "read_hf_as_native", "write_hf_folder",
           "parse_size", "DTYPES"]

READ_THREADS = min(8, os.cpu_count() or 1)  # a rank's reads in parallel: the page faults are the cost
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
TOKENIZER_FILES = re.compile(r"(tokenizer.*|special_tokens_map\.json|added_tokens\.json|vocab\.(json|txt)|merges\.txt|"
                             r"chat_template\.(json|jinja)|.*\.model)")


class HfReader:
    """Tensors of an HF folder by HF name: a block of rows read straight into the memory that holds it (os.preadv:
    no temporary, no page of the file mapped), any other block through safetensors' memory-mapped slices."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.tensors = folder_tensors(self.path)
        except HfFolderError as error:
            raise CheckpointError(str(error)) from None
        # every file opened up front: the reading threads then only look these up
        files = sorted({info.file for info in self.tensors.values()})
        self._handles = {file: safe_open(str(self.path / file), framework="pt", device="cpu") for file in files}
        self._files = {file: os.open(self.path / file, os.O_RDONLY) for file in files}
        self._maps: dict[str, mmap.mmap] = {}

    def close(self) -> None:
        for descriptor in self._files.values():
            os.close(descriptor)
        self._files.clear()
        self._handles.clear()
        self._maps.clear()  # a mapped tensor keeps its own mapping alive

    def mapped(self, name: str, like: torch.Tensor) -> Optional[torch.Tensor]:
        """Tensor `name` as a private, writable mapping of its file's bytes, when it can stand for `like` as it is
        (the same shape and dtype, a CPU tensor); None otherwise."""
        info = self.tensors[name]
        dtype = SAFETENSORS_DTYPES.get(info.dtype)
        if dtype != like.dtype or tuple(info.shape) != tuple(like.shape) or like.device.type != "cpu" or not like.numel():
            return None
        if info.start % like.element_size():
            return None  # torch.frombuffer needs the dtype's alignment
        if info.file not in self._maps:
            self._maps[info.file] = mmap.mmap(self._files[info.file], 0, flags=mmap.MAP_PRIVATE,
                                              prot=mmap.PROT_READ | mmap.PROT_WRITE)
        return torch.frombuffer(self._maps[info.file], dtype=dtype, count=like.numel(), offset=info.start).view(like.shape)

    def __enter__(self) -> "HfReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def block(self, name: str, offset: tuple[int, ...], shape: tuple[int, ...]) -> torch.Tensor:
        """The block of tensor `name` that starts at `offset` and has `shape`, as a new tensor."""
        file = self.tensors[name].file
        if not shape:
            return self._handles[file].get_tensor(name)
        return self._handles[file].get_slice(name)[tuple(slice(start, start + size) for start, size in zip(offset, shape))]

    def read_into(self, name: str, offset: tuple[int, ...], out: torch.Tensor) -> None:
        """Fill `out` with the block of tensor `name` at `offset`."""
        info = self.tensors[name]
        whole_rows = tuple(out.shape[1:]) == info.shape[1:] and not any(offset[1:])
        if not (whole_rows and out.device.type == "cpu" and out.is_contiguous() and out.dtype == SAFETENSORS_DTYPES.get(info.dtype)):
            out.copy_(self.block(name, offset, tuple(out.shape)))
            return
        row_bytes = out.element_size() * (out[0].numel() if out.dim() else 1)
        view = memoryview(out.view(-1).view(torch.uint8).numpy())
        start, done = info.start + (offset[0] if out.dim() else 0) * row_bytes, 0
        while done < len(view):  # one call reads at most ~2 GiB
            count = os.preadv(self._files[info.file], [view[done:]], start + done)
            if count <= 0:
                raise CheckpointError(f"{self.path / info.file}: ended while reading {name} (truncated)")
            done += count


def fill_native_block(reader: HfReader, entries: list[HfTensor], offset: tuple[int, ...], out: torch.Tensor) -> None:
    """Fill `out`, the block of a native parameter at `offset`, from the HF tensors that hold it."""
    first = entries[0]
    if first.expert is not None:  # stacked experts: one HF tensor per index along dim 0
        for index in range(out.shape[0]):
            reader.read_into(entries[offset[0] + index].hf_name, offset[1:], out[index])
    elif first.rope_rows is None:
        reader.read_into(first.hf_name, offset, out)
    else:
        rows = [first.rope_rows.hf_row_of_native(r) for r in range(offset[0], offset[0] + out.shape[0])]
        low, high = min(rows), max(rows) + 1
        covering = reader.block(first.hf_name, (low, *offset[1:]), (high - low, *out.shape[1:]))
        out.copy_(covering[torch.tensor(rows) - low])


def hf_tensor_of_native(native: torch.Tensor, entry: HfTensor) -> torch.Tensor:
    """The HF tensor `entry` from the whole native parameter it belongs to."""
    if entry.expert is not None:
        return native[entry.expert]
    if entry.rope_rows is None:
        return native
    return native[torch.tensor([entry.rope_rows.native_row_of_hf(r) for r in range(native.shape[0])])]


def hf_entries_by_native_name(folder: Path, model: Any) -> dict[str, list[HfTensor]]:
    """The folder's tensors that make up each native parameter (its config.json says whether rope rows interleave)."""
    return by_native_name(hf_tensor_table(model, rope_interleave_of(read_config(folder), model)))


@torch.no_grad()
def load_hf_into_native(folder: Path, model_module: torch.nn.Module) -> None:
    """Fill every parameter `model_module` holds (a native Transformer, whole, sharded or a pipeline stage) from
    the HF folder; each rank reads only its own blocks. CheckpointError (one line) for a parameter it has no
    tensor for (check_hf_folder, run before launch, normally finds that first)."""
    table = hf_entries_by_native_name(Path(folder), model_module.args)
    blocks = []
    with HfReader(Path(folder)) as reader:
        for name, param in model_module.named_parameters():
            if name not in table:
                raise CheckpointError(f"module.checkpoint.load={folder}: no HF tensor fills the native parameter {name}")
            entries = table[name]
            whole = type(param.data) is torch.Tensor and len(entries) == 1 and entries[0].rope_rows is None \
                and entries[0].expert is None
            mapped = reader.mapped(entries[0].hf_name, param.data) if whole else None
            if mapped is not None:
                param.data = mapped
                continue
            local, _, offset = shard_bounds(param)
            blocks += [(entries, offset, local)] if local.numel() else []

        @torch.no_grad()  # grad mode is per thread
        def fill(block) -> None:
            fill_native_block(reader, *block)

        with ThreadPoolExecutor(READ_THREADS) as pool:
            list(pool.map(fill, blocks))  # the reads release the GIL: page faults and copies overlap


@torch.no_grad()
def read_hf_as_native(folder: Path, model: Any) -> dict[str, torch.Tensor]:
    """The whole model of an HF folder under native names, on the CPU, in the dtype the files hold."""
    out = {}
    with HfReader(Path(folder)) as reader:
        for name, entries in hf_entries_by_native_name(Path(folder), model).items():
            dtype = SAFETENSORS_DTYPES[reader.tensors[entries[0].hf_name].dtype]
            out[name] = torch.empty(native_shape(entries), dtype=dtype)
            fill_native_block(reader, entries, (0,) * out[name].dim(), out[name])
    return out


def _shard_plan(table: list[HfTensor], itemsize: int, max_shard_bytes: int) -> list[list[HfTensor]]:
    """The table cut, in order, into shards of at most max_shard_bytes (a larger tensor is a shard alone)."""
    shards: list[list[HfTensor]] = [[]]
    size = 0
    for entry in table:
        nbytes = itemsize * int(torch.Size(entry.shape).numel())
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += nbytes
    return shards


def _generation_config(config: dict) -> dict:
    keys = ("bos_token_id", "eos_token_id", "pad_token_id")
    return {"_from_model_config": True, **{key: config[key] for key in keys if config.get(key) is not None}}


def write_hf_folder(native_state: dict[str, torch.Tensor], model: Any, out: Path, dtype: str = "bf16",
                    max_shard_bytes: int = 5 * 10**9, tokenizer_dir: Optional[Path] = None) -> Path:
    """Write `native_state` (the whole model under native names) as an HF folder at `out`, which must not exist;
    the files appear under `out` all at once (a rename) or not at all."""
    out = Path(out).expanduser()
    if out.exists():
        raise CheckpointError(f"task.out={out}: already exists; choose a new folder (an export never overwrites)")
    torch_dtype = DTYPES[dtype]
    config = {**hf_config_for(model), "dtype": {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype]}
    table = hf_tensor_table(model, rope_interleave_of(config, model))
    shards = _shard_plan(table, torch.tensor([], dtype=torch_dtype).element_size(), max_shard_bytes)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        weight_map, total = {}, 0
        for number, shard in enumerate(shards, start=1):
            file = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
            tensors = {e.hf_name: _own_storage(hf_tensor_of_native(native_state[e.native], e).to(torch_dtype)) for e in shard}
            save_file(tensors, str(tmp / file), metadata={"format": "pt"})
            total += sum(t.numel() * t.element_size() for t in tensors.values())
            weight_map.update({name: file for name in tensors})
        _write_json(tmp / INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})
        _write_json(tmp / "config.json", config)
        _write_json(tmp / "generation_config.json", _generation_config(config))
        for file in sorted(Path(tokenizer_dir).iterdir()) if tokenizer_dir else []:
            if file.is_file() and TOKENIZER_FILES.fullmatch(file.name):
                shutil.copy2(file, tmp / file.name)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor alone in its storage: safetensors refuses tensors that share one (an expert's slice)."""
    tensor = tensor.contiguous()
    if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
        tensor = tensor.clone()
    return tensor


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
