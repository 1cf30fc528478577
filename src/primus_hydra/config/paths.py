"""Where conf/ lives: inside the installed package (wheel) or at the root of a source checkout."""
from __future__ import annotations

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
