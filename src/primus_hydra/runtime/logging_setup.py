"""Rank-aware logging: every rank writes <run_dir>/logs/rank_<r>.log; only rank 0 talks on the console
below WARNING (Hydra configures the console and <run_dir>/<job>.log in the main process). Every handler blanks
the job's secret values out of what it writes (config/secrets.py)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from primus_hydra.config.secrets import redact_text
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


class RedactSecrets(logging.Filter):
    """Blanks these values out of a record: its message with its arguments, and its traceback."""

    def __init__(self, values: Iterable[str]):
        super().__init__()
        self.values = set(values)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.values:
            return True
        message = record.getMessage()
        redacted = redact_text(message, self.values)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, self.values)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info, self.values)
        return True


def redact_secrets_in_logs(values: Iterable[str]) -> None:
    """Every handler of the root logger (console, Hydra's job log, rank logs) blanks these values out, besides
    those it blanked out already."""
    values = set(values)
    for handler in logging.getLogger().handlers:
        installed = next((f for f in handler.filters if isinstance(f, RedactSecrets)), None)
        if installed is None:
            handler.addFilter(RedactSecrets(values))
        else:
            installed.values |= values


def setup_rank_logging(dist: DistributedEnv, run_dir: Path, secrets: Iterable[str] = ()) -> logging.Handler:
    """Attach the per-rank file handler, and make every handler blank out `secrets`; returns the rank handler so
    that the runtime can detach it at the end."""
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
    redact_secrets_in_logs(secrets)
    return handler


def teardown_rank_logging(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()
