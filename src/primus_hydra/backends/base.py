"""The two abstract classes every backend implements: BackendAdapter (config translation, library lookup,
trainer choice) and BaseTrainer (the setup -> init -> train -> cleanup lifecycle)."""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from primus_hydra.errors import BackendUnavailableError
from primus_hydra.runtime.distributed_env import DistributedEnv

_CHECKOUT = Path(__file__).resolve().parents[3]  # <repo> when running from a source checkout
REPO_THIRD_PARTY = _CHECKOUT / "third_party" if (_CHECKOUT / "pyproject.toml").is_file() else None


class BaseTrainer(ABC):
    """A backend's trainer. The runtime calls setup, init, train, then cleanup (cleanup(on_error=True) on failure)."""

    def __init__(self, backend_args: dict, cfg: DictConfig, run_dir: Path, dist: DistributedEnv):
        self.backend_args = backend_args
        self.cfg = cfg
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

    def cleanup(self, on_error: bool = False) -> None:
        """Release resources. Called once, also after a failure."""


class BackendAdapter(ABC):
    """Translates the canonical config to a backend's native arguments and finds its library and trainer."""

    name: str = ""
    import_name: Optional[str] = None  # module that must import for real runs, e.g. "megatron.core"
    distribution: Optional[str] = None  # pip distribution used for version detection
    third_party_dir: Optional[str] = None  # folder name under third_party/ (a source checkout)
    install_hint: str = ""

    def __init__(self, cfg: DictConfig, run_dir: Path, dist: DistributedEnv):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.dist = dist
        self.backend_path: Optional[Path] = None

    # -- library lookup ---------------------------------------------------------------------------------
    def candidate_backend_paths(self) -> list[tuple[str, Path]]:
        """In order: backend.path, $BACKEND_PATH, <repo>/third_party/<dir>, $PRIMUS_THIRDPARTY_DIR or the cache."""
        candidates: list[tuple[str, Path]] = []
        if not self.third_party_dir:  # a backend that ships inside primus_hydra has no source tree to find
            return candidates
        if self.cfg.backend.path:
            candidates.append(("backend.path", Path(self.cfg.backend.path).expanduser()))
        if os.environ.get("BACKEND_PATH"):
            candidates.append(("$BACKEND_PATH", Path(os.environ["BACKEND_PATH"]).expanduser()))
        if REPO_THIRD_PARTY is not None:
            candidates.append(("third_party", REPO_THIRD_PARTY / self.third_party_dir))
        cache_root = os.environ.get("PRIMUS_THIRDPARTY_DIR") or "~/.cache/primus_hydra/third_party"
        candidates.append(("third-party cache", Path(cache_root).expanduser() / self.third_party_dir))
        return candidates

    def setup_backend_path(self) -> Optional[Path]:
        """Put the first existing candidate on sys.path. An explicit backend.path that is missing is an error."""
        for origin, path in self.candidate_backend_paths():
            if path.is_dir():
                if str(path) not in sys.path:
                    sys.path.insert(0, str(path))
                self.backend_path = path
                return path
            if origin in ("backend.path", "$BACKEND_PATH"):
                raise BackendUnavailableError(f"{origin}={path}: no such directory (a {self.name} source checkout)")
        return None

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
        if not self.distribution:
            return None
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def env_defaults(self) -> dict[str, str]:
        """Environment variables this backend wants (setdefault: the user's values win)."""
        return {}

    def validate(self) -> list[str]:
        """Backend-specific rules (what this backend cannot do); one line per failure."""
        return []

    # -- translation ------------------------------------------------------------------------------------
    @abstractmethod
    def convert_config(self) -> dict:
        """The backend's native arguments, built from the canonical config."""

    @abstractmethod
    def load_trainer_class(self, stage: str) -> type[BaseTrainer]:
        """The trainer for module.stage (backend.trainer overrides)."""
