"""Turns Hydra/OmegaConf composition errors into one line that names the key path and what is allowed."""
from __future__ import annotations

from hydra.errors import HydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException


def is_compose_error(error: BaseException) -> bool:
    return isinstance(error, (HydraException, OmegaConfBaseException))


def format_compose_error(error: BaseException) -> str:
    if isinstance(error, MissingConfigException) and error.options:
        return _format_unknown_option(error)
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else None
    detail = cause or error
    message = _first_sentence(str(detail))
    full_key = getattr(detail, "full_key", None)
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
