"""What a run of the step-loop trainers (backend=torch, megatron's core trainer, torchtitan) would find on disk and
refuse, found when the job is prepared, without torch: a module.checkpoint.resume or load that names no checkpoint, a
checkpoint to resume that another backend or another model wrote (each step's meta.json records both, and the model's
parameter count: a model.* value changed since), weights of another size to start from, a fresh start over an
earlier run's checkpoints or metrics. Weights of a model of another name but the same size are a warning: they load
where every shape matches (llama3_8b's into llama3.1_8b)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from primus_hydra.backends.common.checkpoint_paths import CheckpointFolder, megatron_iteration_folder, read_meta
from primus_hydra.backends.common.hf_folder import check_hf_folder, is_hf_folder
from primus_hydra.config.model_math import count_parameters
from primus_hydra.errors import CheckpointError
from primus_hydra.util.records import record

METRICS_FILE = "metrics.jsonl"
RESUME, LOAD = "module.checkpoint.resume", "module.checkpoint.load"
# the backends whose trainers write these step folders; module.checkpoint.load converts the weights of each of them
STEP_LOOP_BACKENDS = ("torch", "megatron", "torchtitan")
# the backends whose trainers start from a Hugging Face folder (module.checkpoint.load=<HF dir>)
HF_LOADING_BACKENDS = ("torch", "megatron", "torchtitan")


@record(frozen=True)
class NamedStep:
    """The step folder module.checkpoint.resume or load names, with its meta.json (problem: why it names none)."""

    key: str
    spec: str
    path: Optional[Path] = None
    meta: Optional[dict] = None
    problem: Optional[str] = None

    @property
    def backend(self) -> str:
        return str(self.meta.get("backend") or "torch")  # checkpoints older than the field were backend=torch's

    @property
    def model(self) -> Optional[str]:
        return self.meta.get("model")

    @property
    def parameters(self) -> Optional[int]:
        """The model's parameter count when it was saved (config/model_math.py; older checkpoints: None)."""
        count = self.meta.get("parameters")
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    def other_parameters(self, count: int) -> bool:
        return self.parameters is not None and self.parameters != count


def named_steps(ckpt: Any, folder: Optional[CheckpointFolder]) -> list[NamedStep]:
    """The steps the run would start from: resume=auto's newest step in `folder` with a readable meta.json (the
    trainer then verifies its files; folder=None: not looked at), a path's step; a path that does not exist is left
    to the orchestrator's own line."""
    found = []
    for key, spec in ((RESUME, ckpt.resume), (LOAD, ckpt.load)):
        if spec is None or (spec == "auto" and (key == LOAD or folder is None)):
            continue
        if spec == "auto":
            newest = folder.newest_with_meta()
            found += [NamedStep(key, spec, *newest)] if newest else []
            continue
        foreign = key == LOAD and (is_hf_folder(Path(str(spec))) or megatron_iteration_folder(Path(str(spec))))
        if not Path(str(spec)).expanduser().exists() or foreign:
            continue  # a missing path is the orchestrator's line, an HF folder hf_load_failures' lines, a
            # Megatron-format folder (Megatron-LM's or Bridge's save) is read when converted
        try:
            path = CheckpointFolder(Path(str(spec))).resolve(str(spec), key)
            found.append(NamedStep(key, str(spec), path, read_meta(path)[0]))
        except CheckpointError as error:
            line = str(error)
            found.append(NamedStep(key, str(spec), problem=line if line.startswith(key) else f"{key}={spec}: {line}"))
    return found


def _where(step: NamedStep) -> str:
    named = Path(step.spec).expanduser().resolve() == step.path.resolve()
    return f"{step.key}={step.spec}: {'the step' if named else step.path}"


def resume_failure(step: NamedStep, backend: str, model: Any) -> Optional[str]:
    """A run resumes its own backend's and model's training state only."""
    name, count = str(model.name), count_parameters(model)
    if step.backend != backend:
        return (f"{_where(step)} was written by backend={step.backend}; backend={backend} resumes only its own "
                f"checkpoints: resume with backend={step.backend}, or start from its weights in another hydra.run.dir "
                f"with {LOAD}={step.path}")
    instead = ("choose another hydra.run.dir or module.checkpoint.dir for this model" if step.spec == "auto"
               else "name a checkpoint of this model")
    if step.model is not None and step.model != name:
        return f"{_where(step)} was written for model={step.model}, this run builds model={name}: resume with " \
               f"model={step.model}, or {instead}"
    if step.other_parameters(count):
        return (f"{_where(step)} was written for model={name} with {step.parameters:,} parameters, this run's has "
                f"{count:,} (a model.* value changed): resume with the model it was written for, or {instead}")
    return None


def load_failure(step: NamedStep, backend: str, model: Any) -> Optional[str]:
    """Weights start a run when a step-loop backend wrote them for a model of this size."""
    if step.backend not in STEP_LOOP_BACKENDS:
        return (f"{_where(step)} was written by backend={step.backend}; backend={backend} starts from the weights of "
                f"{', '.join(STEP_LOOP_BACKENDS)} checkpoints")
    count = count_parameters(model)
    if step.other_parameters(count):
        return (f"{_where(step)} holds the weights of model={step.model} ({step.parameters:,} parameters); this run "
                f"builds model={model.name} with {count:,}: they cannot load into it")
    if step.meta.get("peft"):
        return (f"{_where(step)} is a LoRA run's step (adapters beside frozen weights); export it with "
                f"task=export task.checkpoint={step.path} (the adapters merged) and load that folder")
    return None


def hf_load_failures(spec: Any, backend: str, model: Any) -> list[str]:
    """module.checkpoint.load=<HF dir>: one line per reason its weights cannot start this run (hf_folder.py)."""
    if spec in (None, "auto") or not is_hf_folder(Path(str(spec))):
        return []
    if backend not in HF_LOADING_BACKENDS:
        return [f"{LOAD}={spec}: a Hugging Face folder; backend={backend} does not start from one (backend="
                f"{' or '.join(HF_LOADING_BACKENDS)} does)"]
    return [f"{LOAD}={spec}: {line}" for line in check_hf_folder(Path(str(spec)), model)]


def existing_run_failures(cfg: Any, run_dir: Path, checkpoint_root: Path, backend: str) -> list[str]:
    """One line for each checkpoint or file of an earlier run the job would fail on or overwrite, and for an HF
    folder to start from that cannot fill the model."""
    ckpt = cfg.module.checkpoint
    folder = CheckpointFolder(checkpoint_root)
    failures = hf_load_failures(ckpt.load, backend, cfg.model)
    for step in named_steps(ckpt, folder):
        failure = step.problem or (resume_failure if step.key == RESUME else load_failure)(step, backend, cfg.model)
        failures += [failure] if failure else []
    overwrite = folder.unresumed_failure(ckpt.resume)
    if overwrite:
        failures.append(overwrite)
    if ckpt.resume is None and (run_dir / METRICS_FILE).exists():
        failures.append(f"{run_dir / METRICS_FILE} already holds an earlier run's metrics; choose a new "
                        f"hydra.run.dir, or continue that run with {RESUME}=auto")
    return failures


def checkpoint_load_warnings(cfg: Any) -> list[str]:
    """Weights of another model to start from: they load only where every tensor's shape matches (a checkpoint that
    records its parameter count and differs is refused: load_failure)."""
    model = str(cfg.model.name)
    return [f"{_where(step)} was written for model={step.model}, this run builds model={model}; its weights load only "
            f"if every tensor's shape matches"
            for step in named_steps(cfg.module.checkpoint, None)
            if step.key == LOAD and not step.problem and step.model is not None and step.model != model]
