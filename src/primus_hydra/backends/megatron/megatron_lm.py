"""backend.trainer=megatron_lm: Megatron-LM's own `pretrain()` from a source checkout, as Primus runs it.

The translated arguments reach Megatron-LM as command-line flags that its own parser reads (`parse_args`, then
`validate_args` inside `pretrain`), never as attributes set by hand: a destination the checkout's parser does
not know (a renamed or removed argument) stops the run in one line instead of being dropped. The checkout's
megatron-core (`megatron/core/package_info.py`, read with ast) must be the installed release.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

from primus_hydra.errors import PrimusError

PACKAGE_INFO = Path("megatron") / "core" / "package_info.py"
TRAINING = Path("megatron") / "training"


def is_megatron_lm_checkout(root: Optional[Path]) -> bool:
    return root is not None and (Path(root) / TRAINING / "__init__.py").is_file()


def checkout_version(root: Path) -> Optional[str]:
    """MAJOR.MINOR.PATCH of the megatron-core inside a Megatron-LM checkout, without importing it."""
    try:
        tree = ast.parse((Path(root) / PACKAGE_INFO).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    numbers = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("MAJOR", "MINOR", "PATCH") and isinstance(node.value, ast.Constant):
                numbers[node.targets[0].id] = node.value.value
    if set(numbers) != {"MAJOR", "MINOR", "PATCH"}:
        return None
    return f"{numbers['MAJOR']}.{numbers['MINOR']}.{numbers['PATCH']}"


def version_failure(root: Path, installed: Optional[str]) -> Optional[str]:
    """One line when the checkout's megatron-core is not the installed one (Megatron-LM's tag core_vX.Y.Z)."""
    found = checkout_version(root)
    if found is None:
        return f"backend.path={root}: no megatron-core version in {root / PACKAGE_INFO}; is this a Megatron-LM checkout?"
    if installed is None or found != installed.split("+")[0]:
        return (f"backend.path={root}: the Megatron-LM checkout is megatron-core {found} but megatron-core "
                f"{installed or '(none)'} is installed; check out tag core_v{installed} or install megatron-core=={found}")
    return None


@contextlib.contextmanager
def checkout_first_on_path(root: Optional[Path]) -> Iterator[None]:
    """`root` first on sys.path while the block runs (None: the checkout is already there)."""
    if root is None:
        yield
        return
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(root))


def megatron_lm_parser(root: Optional[Path]) -> argparse.ArgumentParser:
    """The checkout's own argument parser (megatron.training.arguments.add_megatron_arguments)."""
    with checkout_first_on_path(root):
        from megatron.training.arguments import add_megatron_arguments

    return add_megatron_arguments(argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False))


def command_line(args: dict[str, Any], parser: argparse.ArgumentParser) -> list[str]:
    """The flags that make `parser` produce `args` (destinations, values); keys equal to the parser's default are
    left out. A destination the parser does not know, or a value no flag can express, is one line."""
    by_dest: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        if action.option_strings:
            by_dest.setdefault(action.dest, []).append(action)
    argv: list[str] = []
    for key, value in args.items():
        actions = by_dest.get(key)
        if not actions:
            raise PrimusError(f"backend_args.{key}: Megatron-LM's parser has no argument that stores into '{key}' "
                              f"(renamed or removed in this checkout); fix backend.extra_args or use backend.trainer=core")
        if value is None or value == parser.get_default(key):
            continue
        argv += _flags_for(key, value, actions)
    return argv


def _flags_for(key: str, value: Any, actions: list[argparse.Action]) -> list[str]:
    if isinstance(value, bool):
        for action in actions:
            if action.nargs == 0 and action.const is value:  # store_true / store_false
                return [action.option_strings[0]]
        raise PrimusError(f"backend_args.{key}={value}: no flag of Megatron-LM's parser sets it to {value}")
    action = next((a for a in actions if a.nargs != 0), None)
    if action is None:
        raise PrimusError(f"backend_args.{key}={value}: Megatron-LM's '{actions[0].option_strings[0]}' takes no value")
    values = value if isinstance(value, (list, tuple)) else [value]
    return [action.option_strings[0], *(str(item) for item in values)]


def parse_with_megatron(argv: list[str], parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Megatron-LM's parser on these flags; its complaint as one line (argparse would print usage and exit 2)."""
    try:
        namespace, unknown = parser.parse_known_args(argv)
    except SystemExit:
        raise PrimusError(f"Megatron-LM's parser rejected the flags: {' '.join(argv)}") from None
    if unknown:
        raise PrimusError(f"Megatron-LM's parser does not know: {' '.join(unknown)}")
    return namespace
