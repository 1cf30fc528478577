"""The config's hardware entry: a named one as it is, `auto` as the entry of the GPU model this node's vendor tool
reports (the cpu entry without a GPU). task=projection, task=benchmark and task=preflight read it from here."""
from __future__ import annotations

import os
from typing import Any, Mapping

from primus_hydra.orchestrator.gpu_probe import detect_gpu_model
from primus_hydra.projection.hardware import entry_for_gpu_model, load_entry


def configured_hardware_entry(cfg: Any, environ: Mapping[str, str] = os.environ) -> Any:
    if str(cfg.hardware.name) != "auto":
        return cfg.hardware
    return load_entry(entry_for_gpu_model(detect_gpu_model(environ)))
