"""In a Slurm job whose submission froze the user's packages (launch/slurm/user_code.py): that copy goes first on
sys.path, before the job's working directory (which `python -m` puts first, and where the live package may sit)."""
from __future__ import annotations

import os
import sys

FROZEN_USER_ENV = "PRIMUS_FROZEN_USER_PATH"


def put_frozen_user_code_first() -> None:
    path = os.environ.get(FROZEN_USER_ENV)
    if path:
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
