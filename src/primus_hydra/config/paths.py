"""Where conf/ lives: inside the installed package (wheel) or at the root of a source checkout."""
from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def find_conf_dir() -> str:
    packaged = _PACKAGE_DIR / "conf"  # a wheel ships conf/ as primus_hydra/conf
    if (packaged / "config.yaml").is_file():
        return str(packaged)
    checkout = _PACKAGE_DIR.parent.parent / "conf"  # <repo>/src/primus_hydra -> <repo>/conf
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    raise FileNotFoundError(f"primus_hydra: no conf/config.yaml next to {_PACKAGE_DIR} (broken install?)")


def hydra_job_dir(config, *, sweep: bool) -> Path:
    """The directory Hydra's run_job will give this job (hydra.run.dir, or hydra.sweep.dir/subdir), absolute,
    resolved before Hydra makes it. A `${hydra:...}` interpolation in them reads HydraConfig: set for the moment
    (copying the hydra node, so only when one is there)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    section = OmegaConf.to_container(config.hydra.sweep if sweep else config.hydra.run, resolve=False)
    hydra_config = HydraConfig.instance()
    previous = hydra_config.cfg
    if any("${hydra:" in str(value) for value in section.values()):
        hydra_config.set_config(config)
    try:
        if sweep:
            return Path(os.path.abspath(os.path.join(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir))))
        return Path(os.path.abspath(str(config.hydra.run.dir)))  # what Hydra records as hydra.runtime.output_dir
    finally:
        hydra_config.cfg = previous
