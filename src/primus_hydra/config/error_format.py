"""Turns Hydra/OmegaConf composition errors into one line that names the key path and what is allowed."""
from __future__ import annotations

import re

import yaml
from hydra.errors import HydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException

from primus_hydra.errors import ConfigValidationError, PrimusError


def is_compose_error(error: BaseException) -> bool:
    """Composition and command-line errors (Hydra raises some CLI misuse as plain ValueError), and a config file
    that is not valid YAML or not UTF-8."""
    if isinstance(error, (HydraException, OmegaConfBaseException, yaml.YAMLError)):
        return True
    if isinstance(error, UnicodeDecodeError):
        return _config_file_of(error) is not None
    return isinstance(error, ValueError) and _raised_inside_hydra(error)


def _raised_inside_hydra(error: BaseException) -> bool:
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and "/hydra/" in frame.tb_frame.f_code.co_filename


def format_compose_error(error: BaseException) -> str:
    if isinstance(error, MissingConfigException) and error.options:
        return _format_unknown_option(error)
    if isinstance(error, yaml.YAMLError):
        return _format_yaml_error(error)
    if isinstance(error, UnicodeDecodeError):
        return _format_not_utf8(error)
    cause = next((e for e in (error.__cause__, error.__context__) if isinstance(e, OmegaConfBaseException)), None)
    if cause is not None and _PLACEHOLDER.search(str(cause)):  # raised inside OmegaConf, never formatted: the
        cause = None  # outer error carries the same text with the values filled in
    detail = cause or error
    message = _first_sentence(str(detail))
    full_key = getattr(detail, "full_key", None) or getattr(error, "full_key", None)
    # an error inside a group file ("In 'model/stale': ...") has a key relative to that group's node
    in_group = re.match(r"In '([\w/]+)/[^/']+'", str(error)) if cause is not None else None
    if full_key and in_group and not full_key.startswith(f"{in_group.group(1).replace('/', '.')}."):
        full_key = f"{in_group.group(1).replace('/', '.')}.{full_key}"
    if full_key and full_key not in message:
        message = f"{full_key}: {message}"
    if full_key and full_key.startswith("experiment.") and "not in 'PrimusConfig'" in message:
        return ("the selected experiment file does not start with the line `# @package _global_`, so its keys "
                f"landed under `experiment.` ({message}); add that line first: an experiment sets keys of every group")
    return message


def _format_yaml_error(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    if "'\\t'" in problem or "\t" in problem:
        problem = "a tab character (YAML indents with spaces only)"
    context = getattr(error, "context", None)
    where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else "a config file"
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


def _format_not_utf8(error: UnicodeDecodeError) -> str:
    data = error.object[: error.start]
    line = data.count(b"\n") + 1
    column = error.start - (data.rfind(b"\n") + 1) + 1
    return (f"{_config_file_of(error)}:{line}:{column}: not UTF-8 text (byte 0x{error.object[error.start]:02x}); "
            f"save the file as UTF-8")


def _config_file_of(error: BaseException):
    """The config file Hydra was reading when the error was raised (its file source's `full_path`)."""
    frame = error.__traceback__
    found = None
    while frame is not None:
        path = frame.tb_frame.f_locals.get("full_path")
        if isinstance(path, str) and path.endswith((".yaml", ".yml")):
            found = path
        frame = frame.tb_next
    return found


_PLACEHOLDER = re.compile(r"\$(VALUE|VALUE_TYPE|KEY|FULL_KEY|OBJECT_TYPE|KEY_TYPE)\b")


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
