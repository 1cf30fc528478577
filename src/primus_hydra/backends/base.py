"""The two abstract classes every backend implements: BackendAdapter (config translation, library lookup,
trainer choice) and BaseTrainer (the setup -> init -> train -> cleanup lifecycle)."""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.backends.traits import BackendTraits
from primus_hydra.config.layout import ParallelLayout
from primus_hydra.config.targets import load_target
from primus_hydra.distributed_env import DistributedEnv
from primus_hydra.errors import BackendUnavailableError
from primus_hydra.util.installed import installed_version

# set in a Slurm job whose submission froze the backend.path tree (launch/slurm/user_code.py): the copy to read
FROZEN_BACKEND_ENV = "PRIMUS_FROZEN_BACKEND_PATH"

_CHECKOUT = Path(__file__).resolve().parents[3]  # <repo> when running from a source checkout
REPO_THIRD_PARTY = _CHECKOUT / "third_party" if (_CHECKOUT / "pyproject.toml").is_file() else None


class BaseTrainer(ABC):
    """A backend's trainer. The runtime calls setup, init, train, then cleanup (cleanup(on_error=True) on failure)."""

    def __init__(self, backend_args: Any, cfg: DictConfig, layout: ParallelLayout, run_dir: Path, dist: DistributedEnv):
        self.backend_args = backend_args  # what the adapter's convert_config made (after the build_args patches)
        self.cfg = cfg
        self.layout = layout
        self.run_dir = Path(run_dir)
        self.dist = dist

    @abstractmethod
    def setup(self) -> None:
        """Devices, process groups, seeds: everything before the model exists."""

    @abstractmethod
    def init(self) -> None:
        """Build model, optimizer, data; load a checkpoint to resume."""

    @abstractmethod
    def train(self) -> Any:
        """Run the training loop; returns a summary (e.g. the final loss)."""

    def cleanup(self, on_error: bool = False) -> None:  # noqa: B027 - optional: a trainer with nothing to release
        """Release resources. Called once, also after a failure."""


class BackendAdapter(ABC):
    """Translates the canonical config to a backend's native arguments and finds its library and trainer."""

    name: str = ""
    import_name: Optional[str] = None  # module that must import for real runs, e.g. "megatron.core"
    distribution: Optional[str] = None  # pip distribution used for version detection
    third_party_dir: Optional[str] = None  # folder name under third_party/ (a source checkout)
    install_hint: str = ""
    traits: BackendTraits = BackendTraits()  # what code outside the backend's folder asks of it (traits.py)

    @property
    def on_cpu(self) -> bool:
        """platform.device=cpu, or auto where the job gets no GPU (the orchestrator's finding; torch's in a worker)."""
        device = str(self.cfg.platform.device)
        if device != "auto":
            return device == "cpu"
        if self.runs_on_gpu is not None:
            return not self.runs_on_gpu
        import torch  # a worker: the job was prepared by the orchestrator, which made the same choice

        return not torch.cuda.is_available()

    @property
    def required_modules(self) -> tuple[str, ...]:
        """What a real run needs importable (checked before it starts, see requirement_failures)."""
        return (self.import_name,) if self.import_name else ()

    def __init__(self, cfg: DictConfig, layout: ParallelLayout, run_dir: Optional[Path] = None):
        self.cfg = cfg
        self.layout = layout  # the job's, as prepared (config/layout.py)
        self.run_dir = Path(run_dir) if run_dir is not None else None  # None: not known yet (checks only)
        self.backend_path: Optional[Path] = None
        # whether the job's processes get GPUs, as the orchestrator found this node (None: not known here)
        self.runs_on_gpu: Optional[bool] = None
        self.translation: Any = None  # the job's translated arguments once made (backends/translation.py)

    # -- library lookup ---------------------------------------------------------------------------------
    def candidate_backend_paths(self) -> list[tuple[str, Path]]:
        """In order: backend.path, $BACKEND_PATH, <repo>/third_party/<dir>, $PRIMUS_THIRDPARTY_DIR or the cache."""
        candidates: list[tuple[str, Path]] = []
        if not self.third_party_dir:  # a backend that ships inside primus_hydra has no source tree to find
            return candidates
        if self.cfg.backend.path and os.environ.get(FROZEN_BACKEND_ENV):  # a Slurm job: the tree as submitted
            candidates.append(("backend.path (frozen at submission)", Path(os.environ[FROZEN_BACKEND_ENV])))
        elif self.cfg.backend.path:
            candidates.append(("backend.path", Path(self.cfg.backend.path).expanduser()))
        if os.environ.get("BACKEND_PATH"):
            candidates.append(("$BACKEND_PATH", Path(os.environ["BACKEND_PATH"]).expanduser()))
        if REPO_THIRD_PARTY is not None:
            candidates.append(("third_party", REPO_THIRD_PARTY / self.third_party_dir))
        cache_root = os.environ.get("PRIMUS_THIRDPARTY_DIR") or "~/.cache/primus_hydra/third_party"
        candidates.append(("third-party cache", Path(cache_root).expanduser() / self.third_party_dir))
        return candidates

    def find_backend_path(self) -> Optional[Path]:
        """The first candidate that exists; an explicit backend.path or $BACKEND_PATH that does not is an error."""
        for origin, path in self.candidate_backend_paths():
            if path.is_dir():
                return path
            if origin in ("backend.path", "$BACKEND_PATH"):
                raise BackendUnavailableError(f"{origin}={path}: no such directory (a {self.name} source checkout)")
        return None

    def source_paths(self, root: Path) -> list[Path]:
        """The folders of a source tree that go on sys.path (a checkout may keep its package in a sub-folder)."""
        return [root]

    def setup_backend_path(self) -> Optional[Path]:
        """Put the backend's source tree (if one is found) on sys.path."""
        root = self.find_backend_path()
        for path in reversed(self.source_paths(root) if root else []):
            if str(path) not in sys.path:
                sys.path.insert(0, str(path))
        self.backend_path = root
        return root

    def training_failures(self) -> list[str]:
        """What keeps a real run of this backend from training here (checked before it starts)."""
        return self.requirement_failures()

    def library_failures(self) -> list[str]:
        """The backend library's own checks of the translated arguments, which import it (and torch): run when the
        job is prepared only once every other check has passed, so that a refused job never imports them."""
        return []

    def peft_failures(self) -> list[str]:
        """module.peft on a backend that trains no adapters: one line."""
        method = self.cfg.module.get("peft", {}).get("method")
        if method and not self.traits.lora:
            return [f"module.peft.method={method}: backend={self.name} trains no adapters; use backend=torch or "
                    f"megatron_bridge (Megatron-Bridge's LoRA), or module.peft.method=null to train every weight"]
        return []

    def requirement_failures(self) -> list[str]:
        """The modules a real run imports, looked up without importing them (in the source tree too): one line
        naming what is missing and how to get it. The runtime imports them for real (prepare_backend)."""
        try:
            root = self.find_backend_path()
        except BackendUnavailableError as error:
            return [str(error)]
        extra = [str(path) for path in self.source_paths(root)] if root else []
        missing = [name for name in self.required_modules if not module_findable(name, extra)]
        if not missing:
            return []
        where = f" (looked on sys.path and in {root})" if root else ""
        return [f"backend={self.name} needs {', '.join(missing)}, which cannot be found{where}. {self.install_hint}"]

    def prepare_backend(self) -> None:
        """Check that the backend library imports; one line saying what is missing and how to provide it."""
        if not self.import_name:
            return
        try:
            importlib.import_module(self.import_name)
        except ImportError as error:
            where = f" (looked on sys.path and in {self.backend_path})" if self.backend_path else ""
            raise BackendUnavailableError(
                f"backend={self.name} needs `{self.import_name}`, which cannot be imported{where}: {error}. "
                f"{self.install_hint}"
            ) from error

    def detect_backend_version(self) -> Optional[str]:
        return installed_version(self.distribution) if self.distribution else None

    def env_defaults(self) -> dict[str, str]:
        """Environment variables this backend wants (setdefault: the user's values win)."""
        return {}

    def warnings(self) -> list[str]:
        """What this backend will do differently from what the config says, though it can run it (one line each;
        shown once, when the job is prepared)."""
        return []

    def validate(self) -> list[str]:
        """Backend-specific rules (what this backend cannot do with this config and layout); one line per failure.
        Run once, when the job is prepared; never in the workers."""
        return []

    # -- translation ------------------------------------------------------------------------------------
    @abstractmethod
    def convert_config(self) -> Any:
        """The backend's native arguments, built from the canonical config (self.run_dir is set)."""

    def typed_arguments(self, arguments: Any) -> Any:
        """The arguments as the trainer reads them, from their plain form in a job config (to_plain's: dicts, lists,
        scalars) or as they are when typed already. Plain dicts are what the external backends read."""
        return arguments

    def dry_run_files(self, backend_args: Any) -> dict[str, str]:
        """Files a dry run writes into the run dir besides backend_args.yaml (name -> text): the arguments in the
        form the backend's own entry point reads them."""
        return {}

    @abstractmethod
    def load_trainer_class(self, stage: str) -> type[BaseTrainer]:
        """The trainer this backend picks for module.stage."""

    def trainer_class(self, stage: str) -> type[BaseTrainer]:
        """backend.trainer (a trainer class path) when set, else the backend's own choice."""
        if self.cfg.backend.trainer:
            return load_target(self.cfg.backend.trainer, "backend.trainer")
        return self.load_trainer_class(stage)


def adapter_class(cfg: Any) -> type[BackendAdapter]:
    """The adapter class backend._target_ names (importing it imports neither torch nor the backend's library)."""
    return load_target(cfg.backend._target_, "backend._target_")


def load_adapter(cfg: DictConfig, layout: ParallelLayout, run_dir: Optional[Path] = None) -> BackendAdapter:
    """The adapter named by backend._target_, for this config and layout."""
    return adapter_class(cfg)(cfg=cfg, layout=layout, run_dir=run_dir)


def adapter_class_named(name: str) -> Optional[type[BackendAdapter]]:
    """The adapter of backend=`name` (e.g. as a checkpoint's meta.json names the backend that wrote it): the class in
    backends/<name>/adapter.py whose `name` it is; None when no backend has that name."""
    if not name.isidentifier():
        return None
    module_name = f"{__package__}.{name}.adapter"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name in (module_name, module_name.rpartition(".")[0]):  # no such backend, not a broken adapter
            return None
        raise
    return next((value for value in vars(module).values() if isinstance(value, type)
                 and issubclass(value, BackendAdapter) and value.name == name), None)


def module_findable(name: str, extra_paths: list[str]) -> bool:
    """Whether `import name` would find a module, without importing it or its parents."""
    return name in sys.modules or find_module_spec(name, extra_paths) is not None


def find_module_spec(name: str, extra_paths: list[str] = ()) -> Optional[importlib.machinery.ModuleSpec]:
    """The spec `import name` would use (its `origin` is the source file), found without importing it or its parents."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: finders only, nothing imported
    except (ImportError, ValueError):
        spec = None
    if spec is None and extra_paths:
        spec = importlib.machinery.PathFinder.find_spec(top, list(extra_paths))
    for depth in range(len(rest)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join([top, *rest[: depth + 1]]),
                                                        list(spec.submodule_search_locations))
    return spec
