"""task=train: one training job through the PrimusRuntime."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig


class TrainTask:
    def __init__(self, cfg: DictConfig, run_dir: Optional[Path] = None):
        self.cfg = cfg
        self.run_dir = run_dir

    def run(self) -> Any:
        from primus_hydra.runtime.train_runtime import PrimusRuntime

        return PrimusRuntime(self.cfg, self.run_dir or hydra_run_dir()).run()


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)
