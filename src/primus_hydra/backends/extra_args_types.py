"""`backend.extra_args` values checked against the types the backend itself declares, when the job is prepared:
the field annotations of its config dataclasses (megatron-core's TransformerConfig, torchtitan's JobConfig), read
from the installed sources with `ast`, so that neither the library nor torch is imported to check them.

An annotation is understood as far as a value typed on the command line can match it: bool, int, float, str,
None, Optional/Union (also `a | b`), Literal and lists of those. A value matches `float` when it is an int too (as
the backends' own parsers take it), never when it is a bool. Anything else (a callable, torch.dtype, a class of the
library) is not checked. A null value is always accepted: both backends leave a None argument unset.
"""
from __future__ import annotations

import ast
import functools
from typing import Any, Callable, Optional

from primus_hydra.backends.base import find_module_spec
from primus_hydra.backends.extra_args_owners import flatten
from primus_hydra.config.values import to_plain

_KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}
_NAMED = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string", "list": "a list",
          "dict": "a mapping", "None": "null"}
_PLURALS = {"bool": "booleans", "int": "integers", "float": "numbers", "str": "strings"}


@functools.lru_cache(maxsize=None)
def dataclass_annotations(module: str) -> dict[str, dict[str, str]]:
    """{class name: {field: annotation source}} of every class in an installed module, read without importing it;
    empty when the module is not installed."""
    spec = find_module_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return {}
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    return {node.name: {item.target.id: ast.unparse(item.annotation) for item in node.body
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
            for node in tree.body if isinstance(node, ast.ClassDef)}


def extra_args_type_failures(extra: Any, declared: Callable[[str], Optional[tuple[str, str]]],
                             refused: list[str]) -> list[str]:
    """One line per backend.extra_args value (dotted paths for nested sections) of another type than declared(key)
    gives: (annotation, where it is declared), None for a key without one. A key a line of `refused` names already
    (an owned key) is left out: one line per key."""
    failures = []
    for key, value in flatten(to_plain(extra) or {}).items():
        found = declared(key)
        if found is None or any(line.startswith(f"backend.extra_args.{key}=") for line in refused):
            continue
        failure = type_failure(key, value, *found)
        failures += [failure] if failure else []
    return failures


def type_failure(key: str, value: Any, annotation: str, declared_by: str) -> Optional[str]:
    """One line when `value` cannot be of the declared type, naming the key, the value and what is allowed
    (declared_by: where the annotation stands, e.g. "megatron-core's TransformerConfig.hidden_dropout")."""
    if value is None:
        return None
    node = _parse(annotation)
    if node is None or _accepts(node, value) is not False:
        return None
    shown = "[" + ", ".join(map(str, value)) + "]" if isinstance(value, list) else value
    kind = _KINDS.get(type(value), type(value).__name__)
    return f"backend.extra_args.{key}={shown}: expected {_describe(node)}, got {kind} ({declared_by}: {annotation})"


def _parse(annotation: str) -> Optional[ast.expr]:
    try:
        return ast.parse(annotation, mode="eval").body
    except SyntaxError:
        return None


def _head(node: ast.expr) -> str:
    """The name of an annotation's outer type: `Optional` of Optional[int], `dtype` of torch.dtype."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _arguments(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def _members(node: ast.expr) -> Optional[list[ast.expr]]:
    """The alternatives of a Union, an Optional or `a | b`; None for any other annotation."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return [*(_members(node.left) or [node.left]), *(_members(node.right) or [node.right])]
    if isinstance(node, ast.Subscript) and _head(node) in ("Union", "Optional"):
        arguments = _arguments(node)
        return arguments + [ast.Constant(None)] if _head(node) == "Optional" else arguments
    return None


def _accepts(node: ast.expr, value: Any) -> Optional[bool]:
    """True or False where the annotation says; None where it names a type a typed value cannot be checked against."""
    members = _members(node)
    if members is not None:
        return _any([_accepts(member, value) for member in members])
    if isinstance(node, ast.Constant):
        if node.value is None:
            return value is None
        inner = _parse(node.value) if isinstance(node.value, str) else None  # a forward reference
        return _accepts(inner, value) if inner is not None else None
    head = _head(node)
    if head == "Literal" and isinstance(node, ast.Subscript):
        return any(isinstance(option, ast.Constant) and type(option.value) is type(value) and option.value == value
                   for option in _arguments(node))
    if head in ("List", "list", "Sequence", "Tuple", "tuple"):
        if not isinstance(value, list):
            return False
        if not isinstance(node, ast.Subscript) or head in ("Tuple", "tuple"):
            return True
        return _all([_accepts(_arguments(node)[0], item) for item in value])
    checks = {"bool": lambda v: isinstance(v, bool), "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "str": lambda v: isinstance(v, str), "dict": lambda v: isinstance(v, dict),
              "Dict": lambda v: isinstance(v, dict), "Any": lambda v: True}
    return checks[head](value) if head in checks and isinstance(node, (ast.Name, ast.Subscript)) else None


def _any(results: list[Optional[bool]]) -> Optional[bool]:
    return True if True in results else None if None in results else False


def _all(results: list[Optional[bool]]) -> Optional[bool]:
    return False if False in results else None if None in results else True


def _describe(node: ast.expr) -> str:
    members = _members(node)
    if members is not None:
        described = dict.fromkeys(_describe(member) for member in members)
        if "a number" in described:  # an integer is a number
            described.pop("an integer", None)
        return " or ".join(described)
    if isinstance(node, ast.Constant):
        return "null" if node.value is None else str(node.value)
    head = _head(node)
    if head == "Literal" and isinstance(node, ast.Subscript):
        return "one of " + ", ".join(repr(option.value) for option in _arguments(node) if isinstance(option, ast.Constant))
    if head in ("List", "list") and isinstance(node, ast.Subscript):
        item = _head(_arguments(node)[0])
        return f"a list of {_PLURALS[item]}" if item in _PLURALS else "a list"
    return _NAMED.get(head, head)
