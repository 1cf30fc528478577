"""The command line: `python -m primus_hydra [overrides]` and the `primus-hydra` console script.

Both are `@hydra.main` on conf/config.yaml with the full Hydra CLI (--cfg, --info, -m, --config-dir, ...).
Errors the user can fix are printed as one line and exit with code 2; set HYDRA_FULL_ERROR=1 for tracebacks.
"""
from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from primus_hydra.config.error_format import format_compose_error, is_compose_error
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.schema import register_schemas
from primus_hydra.errors import PrimusError


@hydra.main(version_base="1.3", config_path=find_conf_dir(), config_name="config")
def _hydra_main(cfg: DictConfig):
    from primus_hydra.tasks import run_task

    return run_task(cfg)


def main() -> None:
    register_schemas()
    user_wants_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"
    # Let exceptions reach us instead of Hydra's multi-line report, so that we can print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _hydra_main()
    except PrimusError as error:
        if user_wants_traceback:
            raise
        for line in str(error).splitlines() or [type(error).__name__]:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(error.exit_code)
    except Exception as error:
        if user_wants_traceback or not is_compose_error(error):
            raise
        print(f"error: {format_compose_error(error)}", file=sys.stderr)
        sys.exit(2)
    finally:
        if not user_wants_traceback:
            os.environ.pop("HYDRA_FULL_ERROR", None)


if __name__ == "__main__":
    main()
