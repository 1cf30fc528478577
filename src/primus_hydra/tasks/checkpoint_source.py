"""What `task.checkpoint=<dir>` names, for the tasks that read a trained model (export, generate).

    a run dir         -> its newest checkpoint (module.checkpoint.dir, default <run dir>/checkpoints) and the model
                         of its config_resolved.yaml
    a checkpoints dir -> its `latest` step, the model of the run dir above it
    a step dir        -> that step, the model of the run dir its checkpoints dir is in
    an HF folder      -> the model of its config.json (config/hf_config.py), its safetensors weights

find_checkpoint_source reads no tensor and imports no torch (the tasks check what they were given before anything
runs); native_state_dict then reads the whole model under native names, on the CPU. A step another backend wrote
goes through that backend's weight converter (foreign_checkpoints.py), as module.checkpoint.load does.
"""
from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from primus_hydra.backends.common.checkpoint_paths import CheckpointFolder, read_meta
from primus_hydra.backends.common.hf_folder import check_hf_folder, is_hf_folder, read_config
from primus_hydra.backends.common.text_tokenizer import TOKENIZER_FILE
from primus_hydra.config.hf_config import model_fields_from_hf
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.errors import CheckpointError, ConfigValidationError, PrimusError

RESOLVED_CONFIG_FILE = "config_resolved.yaml"  # what every run writes into its run dir (runtime/train_runtime.py)


@dataclass(frozen=True)
class CheckpointSource:
    spec: str
    model: Any  # the canonical model config, as an object (ModelConfig)
    step_dir: Optional[Path] = None  # a step folder (None: an HF folder)
    backend: Optional[str] = None  # the backend that wrote step_dir
    hf_folder: Optional[Path] = None
    run_dir: Optional[Path] = None  # the run that wrote step_dir, when found
    tokenizer_dir: Optional[Path] = None  # the HF tokenizer folder the run used (module.data.tokenizer), if any
    peft: Optional[dict] = None  # a LoRA run's step: its rank and alpha (meta.json), for folding the adapters in

    @property
    def tokenizer_file(self) -> Optional[Path]:
        """The tokenizer.json of tokenizer_dir, when it holds one (None: the byte-level default)."""
        file = self.tokenizer_dir / TOKENIZER_FILE if self.tokenizer_dir is not None else None
        return file if file is not None and file.is_file() else None


def find_checkpoint_source(spec: str, key: str) -> CheckpointSource:
    """The checkpoint `spec` names and the model it holds; PrimusError (one line each) when it names none."""
    if spec in (None, "None", ""):
        raise PrimusError(f"{key} is not set: give a run dir, a checkpoint step dir or a Hugging Face folder")
    path = Path(str(spec)).expanduser()
    if not path.exists():
        raise PrimusError(f"{key}={spec}: no such folder (give a run dir, a checkpoint step dir or a Hugging Face folder)")
    if is_hf_folder(path):
        return _hf_source(path, key)
    run_config = path / RESOLVED_CONFIG_FILE
    if run_config.is_file():  # a run dir: its checkpoints folder
        resolved = OmegaConf.load(run_config)
        root = OmegaConf.select(resolved, "module.checkpoint.dir") or path / "checkpoints"
        step = _resolve_step(Path(str(root)), key, spec)
        return _step_source(spec, step, path, resolved)
    step = _resolve_step(path, key, spec)
    run_dir = step.parent.parent
    if not (run_dir / RESOLVED_CONFIG_FILE).is_file():
        raise PrimusError(f"{key}={spec}: no {RESOLVED_CONFIG_FILE} in {run_dir}, the run dir above the checkpoint "
                          f"(it says which model the weights are of); give the run dir itself")
    return _step_source(spec, step, run_dir, OmegaConf.load(run_dir / RESOLVED_CONFIG_FILE))


def _resolve_step(path: Path, key: str, spec: str) -> Path:
    try:
        step = CheckpointFolder(path).resolve(str(path), key)
        read_meta(step)
    except CheckpointError as error:
        line = str(error)
        raise PrimusError(line if line.startswith(key) else f"{key}={spec}: {line}") from None
    return step


def _step_source(spec: str, step: Path, run_dir: Path, resolved: Any) -> CheckpointSource:
    model = model_object(OmegaConf.to_container(resolved.model, resolve=False))
    tokenizer = OmegaConf.select(resolved, "module.data.tokenizer", default=None)
    meta = read_meta(step)[0]
    backend = str(meta.get("backend") or "torch")  # older native steps record no backend
    return CheckpointSource(spec, model, step_dir=step, backend=backend, run_dir=run_dir,
                            tokenizer_dir=Path(str(tokenizer)) if tokenizer else None, peft=meta.get("peft"))


def _hf_source(path: Path, key: str) -> CheckpointSource:
    where = f"{key}={path}"
    try:
        config = read_config(path)
    except Exception as error:  # noqa: BLE001 - hf_folder's one line
        raise PrimusError(f"{where}: {error}") from None
    fields = model_fields_from_hf(config, where)
    fields.setdefault("name", path.name)
    model = model_object(fields)
    failures = check_hf_folder(path, model)
    if failures:
        raise ConfigValidationError([f"{key}: {line}" for line in failures])
    return CheckpointSource(str(path), model, hf_folder=path, tokenizer_dir=path)


def model_object(fields: dict) -> ModelConfig:
    """Canonical model fields (a run's resolved `model`, or config.json's) as a typed ModelConfig."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), fields))


def native_state_dict(source: CheckpointSource) -> dict:
    """The whole model of `source` under native parameter names, on this process's CPU (no process group)."""
    if source.hf_folder is not None:
        from primus_hydra.backends.common.hf_checkpoint import read_hf_as_native

        return read_hf_as_native(source.hf_folder, source.model)
    from primus_hydra.backends.common.foreign_checkpoints import read_checkpoint_tensors, weight_converter
    from primus_hydra.config.targets import load_target

    def read_native(step: Path) -> dict:
        with warnings.catch_warnings():  # DCP's note that it reads in one process: what is meant here
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            tensors = read_checkpoint_tensors(step, lambda key: key.startswith("model."), "backend=torch")
        return {key[len("model."):]: tensor for key, tensor in tensors.items()}

    converter = weight_converter(source.backend)
    if converter is None:
        if source.peft:  # a LoRA run's step: the adapted model, adapters folded into their weights
            from primus_hydra.backends.common.lora_weights import merged_adapters

            return merged_adapters(read_native(source.step_dir), source.peft)
        return read_native(source.step_dir)
    with tempfile.TemporaryDirectory(prefix="primus_native_") as scratch:
        out = Path(scratch) / source.step_dir.name
        load_target(converter, "weight_converter")(source.step_dir, out, source.model)
        return read_native(out)



