"""Turns Hydra/OmegaConf composition errors into one line that names the key path and what is allowed."""
from __future__ import annotations

import re

from hydra.errors import HydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException


def is_compose_error(error: BaseException) -> bool:
    """Composition and command-line errors (Hydra raises some CLI misuse as plain ValueError)."""
    if isinstance(error, (HydraException, OmegaConfBaseException)):
        return True
    return isinstance(error, ValueError) and _raised_inside_hydra(error)


def _raised_inside_hydra(error: BaseException) -> bool:
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and "/hydra/" in frame.tb_frame.f_code.co_filename


def format_compose_error(error: BaseException) -> str:
    if isinstance(error, MissingConfigException) and error.options:
        return _format_unknown_option(error)
    cause = next((e for e in (error.__cause__, error.__context__) if isinstance(e, OmegaConfBaseException)), None)
    detail = cause or error
    message = _first_sentence(str(detail))
    full_key = getattr(detail, "full_key", None) or getattr(error, "full_key", None)
    # an error inside a group file ("In 'model/stale': ...") has a key relative to that group's node
    in_group = re.match(r"In '([\w/]+)/[^/']+'", str(error)) if cause is not None else None
    if full_key and in_group and not full_key.startswith(f"{in_group.group(1).replace('/', '.')}."):
        full_key = f"{in_group.group(1).replace('/', '.')}.{full_key}"
    if full_key and full_key not in message:
        message = f"{full_key}: {message}"
    return message


def _format_unknown_option(error: MissingConfigException) -> str:
    group = (error.missing_cfg_file or "").rsplit("/", 1)[0] or "?"
    wanted = (error.missing_cfg_file or "").rsplit("/", 1)[-1]
    options = ", ".join(sorted(error.options))
    return f"{group}={wanted} is not an option of group '{group}'; available: {options}"


def _first_sentence(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    kept = [line for line in lines if not line.startswith(("full_key:", "object_type=", "reference_type="))]
    return " ".join(kept) if kept else text.strip()


def user_error_lines(error: BaseException) -> list[str]:
    """What to print for an error the user can fix: a failed check's lines, a user error's lines, a composition
    error as one line. Anything else is a bug: re-raised, with its traceback."""
    from primus_hydra.errors import ConfigValidationError, PrimusError

    if isinstance(error, ConfigValidationError):
        return list(error.failures)
    if isinstance(error, PrimusError):
        return str(error).splitlines() or [type(error).__name__]
    if is_compose_error(error):
        return [format_compose_error(error)]
    raise error


def stop_with(lines: list[str], exit_code: int = 2) -> None:
    """Print each line on stderr and exit: a rejected command, before anything ran."""
    import sys

    for line in lines:
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(exit_code)
