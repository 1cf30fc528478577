"""A Hugging Face checkpoint folder read without torch: which file holds which tensor (model.safetensors.index.json,
or the one model.safetensors), each tensor's dtype and shape from the safetensors headers, and the check the
orchestrator runs on `module.checkpoint.load=<HF dir>` before any worker starts (check_hf_folder).

A safetensors file is an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
then the data: reading the header alone tells whether every tensor is there, of its shape, and fully on disk.
"""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any, Optional

from primus_hydra.backends.common.hf_names import hf_tensor_table
from primus_hydra.config.hf_config import hf_config_for
from primus_hydra.errors import ConfigValidationError
from primus_hydra.util.records import record

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
_MAX_HEADER = 100 << 20  # a header larger than this is no safetensors header
_SHOWN = 3  # names listed in a line about many tensors
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "TIB": 2**40}


class HfFolderError(Exception):
    """A folder that is no readable HF checkpoint: one line."""


@record(frozen=True)
class TensorInfo:
    file: str  # the safetensors file holding it (a name inside the folder)
    dtype: str  # safetensors' spelling: F32, BF16, ...
    shape: tuple[int, ...]
    start: int = 0  # where its bytes begin in the file


def is_hf_folder(path: Path) -> bool:
    """A folder that looks like an HF checkpoint (config.json or safetensors files), not a native step folder."""
    path = Path(path).expanduser()
    if not path.is_dir() or (path / "meta.json").exists():
        return False
    return (path / CONFIG).is_file() or (path / INDEX).is_file() or any(path.glob("*.safetensors"))


def read_config(path: Path) -> dict:
    file = Path(path) / CONFIG
    if not file.is_file():
        raise HfFolderError(f"{path}: no {CONFIG} (an HF checkpoint folder has config.json beside its *.safetensors)")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise HfFolderError(f"{file}: unreadable ({type(error).__name__}: {error})") from error
    if not isinstance(config, dict):
        raise HfFolderError(f"{file}: not a JSON object")
    return config


def weight_files(path: Path) -> dict[str, str]:
    """{tensor name: file} from the index when there is one; else {"*": model.safetensors}'s own tensors later."""
    path = Path(path)
    index = path / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise HfFolderError(f"{index}: unreadable or without a weight_map ({type(error).__name__}: {error})") from error
        if not isinstance(weight_map, dict):
            raise HfFolderError(f"{index}: its weight_map is not an object")
        return {str(name): str(file) for name, file in weight_map.items()}
    if not (path / SINGLE_FILE).is_file():
        raise HfFolderError(f"{path}: neither {INDEX} nor {SINGLE_FILE} (the weights of an HF checkpoint)")
    return {}


def read_header(file: Path) -> dict[str, TensorInfo]:
    """The tensors of one safetensors file; HfFolderError when the file is missing, not safetensors, or shorter
    than its header says (truncated)."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            raw = handle.read(8)
            length = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
            header = json.loads(handle.read(length)) if 0 < length <= min(_MAX_HEADER, size - 8) else None
    except FileNotFoundError:
        raise HfFolderError(f"{file}: missing") from None
    except (OSError, ValueError) as error:
        raise HfFolderError(f"{file}: not a safetensors file ({type(error).__name__}: {error})") from error
    if not isinstance(header, dict):
        raise HfFolderError(f"{file}: not a safetensors file (no readable header)")
    tensors, end = {}, 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = (int(offset) for offset in entry["data_offsets"])
            tensors[name] = TensorInfo(file.name, str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), 8 + length + begin)
            end = max(end, stop)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise HfFolderError(f"{file}: its header entry for {name} is malformed ({error})") from error
    if size < 8 + length + end:
        raise HfFolderError(f"{file}: {size} bytes, its header needs {8 + length + end} (truncated)")
    return tensors


def folder_tensors(path: Path) -> dict[str, TensorInfo]:
    """Every tensor of the folder, read from the headers of the files the index names (or of model.safetensors)."""
    path = Path(path)
    names = weight_files(path)
    files = sorted(set(names.values())) or [SINGLE_FILE]
    missing = [file for file in files if not (path / file).is_file()]
    if missing:
        raise HfFolderError(f"{path / INDEX}: names {len(missing)} file(s) that are not there ({', '.join(missing[:_SHOWN])})")
    tensors: dict[str, TensorInfo] = {}
    for file in files:
        tensors.update(read_header(path / file))
    absent = [name for name, file in names.items() if name not in tensors or tensors[name].file != file]
    if absent:
        raise HfFolderError(f"{path / INDEX}: {len(absent)} tensor(s) are not in the file it names "
                            f"({', '.join(absent[:_SHOWN])})")
    return tensors


def rope_interleave_of(config: dict, model: Any) -> bool:
    """Whether the folder stores MLA rope rows interleaved: DeepSeek's published layout (V2 always, V3 unless its
    config.json says rope_interleave: false)."""
    return bool(model.mla.enabled and config.get("rope_interleave", True))


def tensor_failures(path: Path, tensors: dict[str, TensorInfo], model: Any, rope_interleave: bool) -> list[str]:
    """One line per tensor of the model's table that is missing (one line for all), of another shape, or no float."""
    failures, missing = [], []
    for entry in hf_tensor_table(model, rope_interleave):
        info = tensors.get(entry.hf_name)
        if info is None:
            missing.append(entry.hf_name)
        elif info.shape != entry.shape:
            failures.append(f"{path}: {entry.hf_name} is {list(info.shape)} in {info.file}, model={model.name} "
                            f"needs {list(entry.shape)}")
        elif info.dtype not in FLOAT_DTYPES:
            failures.append(f"{path}: {entry.hf_name} is {info.dtype} in {info.file}; weights are one of "
                            f"{', '.join(FLOAT_DTYPES)}")
    if missing:
        failures.insert(0, f"{path}: {len(missing)} tensor(s) of model={model.name} are missing "
                           f"({', '.join(missing[:_SHOWN])}{'...' if len(missing) > _SHOWN else ''})")
    return failures


def architecture_failure(path: Path, config: dict, model: Any) -> Optional[str]:
    """config.json describes another model than the job's (its model_type, or a size the tensors would show)."""
    try:
        expected = hf_config_for(model)
    except ConfigValidationError as error:
        return f"{path}: the job's model has no Hugging Face counterpart ({error})"
    differing = [key for key in ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
                 if key in config and key in expected and config[key] != expected[key]]
    if not differing:
        return None
    shown = ", ".join(f"{key}={config[key]} (model={model.name}: {expected[key]})" for key in differing)
    return f"{path / CONFIG}: another architecture than the job's model: {shown}"


def check_hf_folder(path: Path, model: Any) -> list[str]:
    """One line per reason the folder cannot fill `model`'s weights: no config.json, another architecture, a
    missing or truncated shard, an index naming a file that is not there, a tensor missing, of another shape or
    not floating point. Reads config.json, the index and the safetensors headers only."""
    path = Path(path).expanduser()
    try:
        config = read_config(path)
        failure = architecture_failure(path, config, model)
        if failure:
            return [failure]
        tensors = folder_tensors(path)
    except HfFolderError as error:
        return [str(error)]
    return tensor_failures(path, tensors, model, rope_interleave_of(config, model))


def parse_size(text: Any) -> int:
    """'5GB', '500MB', '2GiB' or a number of bytes -> bytes; ValueError for anything else."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?B|B)?\s*", str(text).upper())
    if not match:
        raise ValueError(text)
    return int(float(match.group(1)) * _UNITS[match.group(2) or ""])
