"""The composed config handed from the orchestrator to its workers: composed once, resolved once, read by all.

Workers never recompose (a second composition could resolve ${now:} or ${oc.env:} differently, hydra #2070);
they load this file back into the typed schema.
"""
from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from primus_hydra.config.schema import BACKEND_SCHEMAS, PrimusConfig

JOB_CONFIG_FILE = Path(".primus") / "job_config.yaml"


def write_job_config(cfg: DictConfig, run_dir: Path) -> Path:
    target = Path(run_dir) / JOB_CONFIG_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    container.pop("hydra", None)
    tmp = target.with_suffix(f".tmp.{os.getpid()}")  # every node's agent may write it (same content) at once
    tmp.write_text(OmegaConf.to_yaml(OmegaConf.create(container)))
    tmp.replace(target)
    return target


def load_job_config(path: Path) -> DictConfig:
    raw = OmegaConf.load(path)
    backend = raw.pop("backend")
    cfg = OmegaConf.merge(OmegaConf.structured(PrimusConfig), raw)
    schema = BACKEND_SCHEMAS.get(str(backend.get("name")))
    cfg.backend = OmegaConf.merge(OmegaConf.structured(schema), backend) if schema else backend
    return cfg
