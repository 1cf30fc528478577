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
    resolved before Hydra makes it: its `${hydra:...}` interpolations read HydraConfig, set here for the moment."""
    from hydra.core.hydra_config import HydraConfig

    hydra_config = HydraConfig.instance()
    previous = hydra_config.cfg
    hydra_config.set_config(config)
    try:
        if sweep:
            return Path(os.path.abspath(os.path.join(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir))))
        return Path(os.path.abspath(str(config.hydra.run.dir)))  # what Hydra records as hydra.runtime.output_dir
    finally:
        hydra_config.cfg = previous
