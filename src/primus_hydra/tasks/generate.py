"""task=generate: what a model says after a prompt, decoded by the native model with a KV cache
(backends/torch/generation.py), from a run dir, a checkpoint step dir or a Hugging Face folder.

    python -m primus_hydra task=generate task.checkpoint=<dir> task.prompt="..." | task.prompt_tokens=[...]
        [task.max_new_tokens=32 task.temperature=0 task.top_p=1.0 task.seed=0 task.save_logits=false task.dtype=fp32]

Everything the command line can get wrong (the checkpoint, the prompt, a token past the vocabulary, the numbers) is
checked when the job is prepared, before the run dir exists, one line each. Text is tokenized by the folder's
tokenizer.json (the `tokenizers` library) when it has one, else byte-level as backend=torch reads text (byte b is
token b). It prints the text (or, for task.prompt_tokens, the tokens) and writes <run dir>/generation.json.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.backends.common.text_tokenizer import eos_token
from primus_hydra.backends.common.text_tokenizer import load_tokenizer as _tokenizer
from primus_hydra.config.values import without_hydra_node
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import HANDOFF
from primus_hydra.tasks.checkpoint_source import find_checkpoint_source
from primus_hydra.tasks.plan import handed_over_at

GENERATION_FILE = "generation.json"
BYTE_VOCAB = 256  # byte-level text: byte b is token b


@dataclass
class GenerationRequest:
    """What task=generate prepares: the checkpoint found and the prompt as token ids, all checked."""

    cfg: DictConfig  # without the `hydra` node
    source: Any  # tasks/checkpoint_source.py's answer for task.checkpoint
    prompt_tokens: list[int]
    tokenizer_file: Optional[Path]  # None: byte-level
    eos_token_ids: list[int]
    warnings: list = field(default_factory=list)
    plan: None = None  # runs in this process: no resource plan


class GenerateTask:
    def __init__(self, cfg: DictConfig, job: Optional[GenerationRequest] = None):
        self.cfg, self.job = cfg, job

    @classmethod
    def prepare_job(cls, cfg: DictConfig, run_dir: Optional[Path], *, plan=None,
                    sweep_points: Optional[int] = None) -> GenerationRequest:
        cfg = without_hydra_node(cfg)
        task = cfg.task
        failures = setting_failures(task)
        if failures:
            raise ConfigValidationError(failures)
        source = find_checkpoint_source(str(task.checkpoint), "task.checkpoint")
        tokenizer_file = source.tokenizer_file
        prompt_tokens = (list(task.prompt_tokens) if task.prompt_tokens is not None
                         else encode(str(task.prompt), tokenizer_file))
        failures = prompt_failures(task, prompt_tokens, int(source.model.vocab_size))
        if failures:
            raise ConfigValidationError(failures)
        return GenerationRequest(cfg, source, prompt_tokens, tokenizer_file, eos_token_ids(source, tokenizer_file))

    def run(self) -> dict:
        job = self.job or HANDOFF.take(handed_over_at()) or self.prepare_job(self.cfg, None)
        task = job.cfg.task
        result = generate_from_checkpoint(job)
        record = {"checkpoint": str(task.checkpoint), "prompt_tokens": result.prompt_tokens,
                  "tokens": result.tokens, "stopped_at_eos": result.stopped_at_eos}
        if task.prompt is not None:
            record["text"] = decode(result.tokens, job.tokenizer_file)
            print(str(task.prompt) + record["text"], flush=True)
        else:
            print(json.dumps(result.tokens), flush=True)
        if task.save_logits:
            record["logits"] = [logits.tolist() for logits in result.logits]
        (handed_over_at() / GENERATION_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")
        return record


def generate_from_checkpoint(job: GenerationRequest):
    """The native model with the checkpoint's weights (on the GPU when there is one), then its generation."""
    from primus_hydra.backends.common.native_generation import Sampling, generate_with_weights
    from primus_hydra.tasks.checkpoint_source import native_state_dict

    task = job.cfg.task
    sampling = Sampling(temperature=float(task.temperature), top_p=float(task.top_p), seed=int(task.seed))
    return generate_with_weights(job.source.model, native_state_dict(job.source), job.prompt_tokens,
                                 int(task.max_new_tokens), sampling, job.eos_token_ids,
                                 keep_logits=bool(task.save_logits), dtype=str(task.dtype))


def setting_failures(task: DictConfig) -> list[str]:
    """One line per setting that cannot work, whatever the checkpoint."""
    failures = []
    if task.checkpoint is None:
        failures.append("task.checkpoint=null: give the model to ask, task.checkpoint=<run dir | checkpoint step "
                        "dir | Hugging Face folder>")
    elif not Path(str(task.checkpoint)).expanduser().exists():
        failures.append(f"task.checkpoint={task.checkpoint}: no such file or folder; give a run dir, a checkpoint "
                        "step dir or a Hugging Face folder")
    if (task.prompt is None) == (task.prompt_tokens is None):
        both = "both are" if task.prompt is not None else "neither is"
        failures.append(f"task.prompt / task.prompt_tokens: {both} set; give exactly one (task.prompt=\"...\" or "
                        "task.prompt_tokens=[1,2,3])")
    if task.max_new_tokens < 1:
        failures.append(f"task.max_new_tokens={task.max_new_tokens}: must be at least 1")
    if task.temperature < 0:
        failures.append(f"task.temperature={task.temperature}: must be >= 0 (0: greedy)")
    if not 0 < task.top_p <= 1:
        failures.append(f"task.top_p={task.top_p}: must be in (0, 1]")
    return failures


def prompt_failures(task: DictConfig, prompt_tokens: list[int], vocab_size: int) -> list[str]:
    key = "task.prompt_tokens" if task.prompt_tokens is not None else "task.prompt"
    if not prompt_tokens:
        return [f"{key}: empty; the model needs at least one token to continue"]
    outside = [token for token in prompt_tokens if not 0 <= token < vocab_size]
    if outside:
        return [f"{key}: token id {outside[0]} is outside the model's vocabulary (0 .. {vocab_size - 1}, "
                f"vocab_size={vocab_size} in task.checkpoint={task.checkpoint})"]
    return []


def encode(text: str, tokenizer_file: Optional[Path]) -> list[int]:
    if tokenizer_file is None:
        return list(text.encode("utf-8"))
    return _tokenizer(tokenizer_file).encode(text).ids


def decode(tokens: list[int], tokenizer_file: Optional[Path]) -> str:
    if tokenizer_file is None:
        return bytes(token for token in tokens if token < BYTE_VOCAB).decode("utf-8", errors="replace")
    return _tokenizer(tokenizer_file).decode(tokens)


def eos_token_ids(source: Any, tokenizer_file: Optional[Path]) -> list[int]:
    """The end-of-sequence ids: an HF folder's generation_config.json's, else its config.json's (an id or a list),
    else the tokenizer's eos_token (tokenizer_config.json or special_tokens_map.json beside tokenizer.json, as the
    text data is ended: text_tokenizer.eos_token); none for a byte-level model."""
    for name in ("generation_config.json", "config.json"):
        value = _json_field(source.hf_folder / name, "eos_token_id") if source.hf_folder is not None else None
        if value is not None:
            return [int(token) for token in (value if isinstance(value, list) else [value])]
    if tokenizer_file is None:
        return []
    eos = eos_token(tokenizer_file.parent)
    token = _tokenizer(tokenizer_file).token_to_id(eos) if eos is not None else None
    return [] if token is None else [token]


def _json_field(path: Path, key: str) -> Any:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document.get(key) if isinstance(document, dict) else None
