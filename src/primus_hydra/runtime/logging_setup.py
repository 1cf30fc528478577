"""Rank-aware logging: every rank writes <run_dir>/logs/rank_<r>.log; only rank 0 talks on the console
below WARNING (Hydra configures the console and <run_dir>/<job>.log in the main process)."""
from __future__ import annotations

import logging
from pathlib import Path

from primus_hydra.distributed_env import DistributedEnv

_FORMAT = "[%(asctime)s][rank %(rank)s][%(name)s][%(levelname)s] - %(message)s"


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True


FILE_ONLY = {"file_only": True}  # extra= for records that the console already shows in another form


class _SkipFileOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "file_only", False)


def setup_rank_logging(dist: DistributedEnv, run_dir: Path) -> logging.Handler:
    """Attach the per-rank file handler; returns it so that the runtime can detach it at the end."""
    log_dir = Path(run_dir) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_dir / f"rank_{dist.rank}.log")
    handler.addFilter(_RankFilter(dist.rank))
    handler.setFormatter(logging.Formatter(_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    for console in root.handlers:
        if isinstance(console, logging.StreamHandler) and not isinstance(console, logging.FileHandler):
            if not any(isinstance(f, _SkipFileOnly) for f in console.filters):
                console.addFilter(_SkipFileOnly())
            if not dist.is_main:
                console.setLevel(logging.WARNING)
    return handler


def teardown_rank_logging(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()
