"""task=export: a trained model as a Hugging Face folder that `transformers.AutoModelForCausalLM.from_pretrained`
loads.

    python -m primus_hydra task=export task.checkpoint=<run dir | step dir> task.format=hf task.out=<DIR>
        [task.dtype=bf16|fp32] [task.max_shard_size=5GB]

The checkpoint may come from any backend that trains (megatron and torchtitan steps go through their weight
converters) and any layout it was saved in (DCP reshards to whole tensors). Everything the command line can get
wrong is checked when the job is prepared, one line each, before any weight is read; the folder is written beside
task.out and renamed into place (backends/common/hf_checkpoint.py). No run dir is made.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.backends.common.hf_folder import parse_size
from primus_hydra.config.hf_config import hf_config_for
from primus_hydra.config.paths import writable_dir_failure
from primus_hydra.config.values import without_hydra_node
from primus_hydra.errors import ConfigValidationError, PrimusError
from primus_hydra.orchestrator.prepare import HANDOFF
from primus_hydra.tasks.checkpoint_source import CheckpointSource, find_checkpoint_source
from primus_hydra.tasks.plan import handed_over_at

_SIZE_HINT = "a size such as 5GB, 500MB or 2GiB"


@dataclass
class ExportJob:
    """What task=export prepares: the checkpoint found, where the folder goes, its shard size; all checked."""

    cfg: DictConfig  # without the `hydra` node
    source: CheckpointSource
    out: Path
    max_shard_bytes: int
    warnings: list = field(default_factory=list)
    plan: None = None


class ExportTask:
    writes_nothing = True  # but task.out: no run dir, whatever hydra.run.dir says (tasks/callback.py)

    def __init__(self, cfg: DictConfig, job: Optional[ExportJob] = None):
        self.cfg, self.job = cfg, job

    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None,
                    sweep_points: Optional[int] = None) -> ExportJob:
        cfg = without_hydra_node(cfg)
        task = cfg.task
        failures, out, max_shard_bytes = setting_failures(task)
        if failures:
            raise ConfigValidationError(failures)
        source = find_checkpoint_source(str(task.checkpoint), "task.checkpoint")
        if source.hf_folder is not None:
            raise PrimusError(f"task.checkpoint={task.checkpoint}: already a Hugging Face folder; give a run dir or a "
                              f"checkpoint step dir to export")
        hf_config_for(source.model)  # a model with no Hugging Face counterpart: its one line, before anything is read
        return ExportJob(cfg, source, out, max_shard_bytes)

    def run(self) -> Path:
        job = self.job or HANDOFF.take(handed_over_at()) or self.prepare_job(self.cfg, None)
        return export_hf(job)


def setting_failures(task: Any) -> tuple[list[str], Optional[Path], int]:
    """task.out (new, in a writable place) and task.max_shard_size, one line each."""
    failures, out, max_shard_bytes = [], None, 0
    if not task.out:
        failures.append("task.out is not set: give the folder to write (it must not exist)")
    else:
        out = Path(str(task.out)).expanduser().absolute()
        if out.exists() or out.is_symlink():
            failures.append(f"task.out={task.out}: already exists; give a new folder (an export never overwrites)")
        else:
            failure = writable_dir_failure("task.out", str(out.parent), "the export is written beside task.out and "
                                           "renamed into place; choose a folder this user can write")
            failures += [failure] if failure else []
    try:
        max_shard_bytes = parse_size(task.max_shard_size)
    except ValueError:
        failures.append(f"task.max_shard_size={task.max_shard_size}: not {_SIZE_HINT}")
    if max_shard_bytes <= 0 and len(failures) == 0:
        failures.append(f"task.max_shard_size={task.max_shard_size}: must be more than 0 bytes ({_SIZE_HINT})")
    return failures, out, max_shard_bytes


def export_hf(job: ExportJob) -> Path:
    """Read the whole model under native names, write the HF folder, say where and how fast."""
    from primus_hydra.backends.common.hf_checkpoint import write_hf_folder
    from primus_hydra.tasks.checkpoint_source import native_state_dict

    task, started = job.cfg.task, time.perf_counter()
    state = native_state_dict(job.source)
    read_s = time.perf_counter() - started
    out = write_hf_folder(state, job.source.model, job.out, dtype=str(task.dtype), max_shard_bytes=job.max_shard_bytes,
                          tokenizer_dir=_run_tokenizer_dir(job.source))
    total_s = time.perf_counter() - started
    files = sorted(path.name for path in out.glob("*.safetensors"))
    print(f"exported {job.source.step_dir} ({job.source.backend}) as Hugging Face {hf_config_for(job.source.model)['model_type']} "
          f"to {out}: {len(files)} safetensors file(s), {task.dtype}, read {read_s:.1f} s, total {total_s:.1f} s", flush=True)
    return out


def _run_tokenizer_dir(source: CheckpointSource) -> Optional[Path]:
    """The folder whose tokenizer files go with the export: the run's HF tokenizer, when it had one."""
    return source.tokenizer_file.parent if source.tokenizer_file is not None else None
