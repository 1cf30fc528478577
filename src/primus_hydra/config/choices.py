"""The two kinds of constrained values in the schema: a `Choice` among named options, and `auto` or an integer.

A Choice field holds an Enum member that compares equal to its name and prints as it (also in f-strings), so a
bad value fails at composition with the allowed options, and code and messages read the plain name.

`auto` or an integer: OmegaConf 2.3 structured configs have no Union type, so these fields are typed `Any`
(`AutoInt`) and checked by `auto_int_failure` during validation; `auto_int` reads them.
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Optional

AUTO = "auto"
AutoInt = Any  # "auto" or an integer (see the module docstring)


class Choice(str, Enum):
    def __str__(self) -> str:
        return self.value


def choice(name: str, options: str, module: str) -> type[Choice]:
    """A Choice whose option names need not be Python identifiers (`1f1b`), defined in `module` under `name`:
    `PipelineSchedule = choice("PipelineSchedule", "1f1b gpipe", __name__)`."""
    return Choice(name, [(option, option) for option in options.split()], module=module, qualname=name)


def is_auto(value: Any) -> bool:
    return str(value) == AUTO


def auto_int(value: Any) -> Optional[int]:
    """None for `auto`, else the integer (validation has checked it)."""
    return None if is_auto(value) else int(value)


def auto_int_failure(key: str, value: Any, minimum: int = 0) -> Optional[str]:
    """One line when `value` is neither `auto` nor an integer >= minimum; None when it is fine."""
    if is_auto(value):
        return None
    text = str(value).strip()
    if not isinstance(value, bool) and text.isdigit() and int(text) >= minimum:
        return None
    return f"{key}={value}: must be 'auto' or an integer >= {minimum}"
