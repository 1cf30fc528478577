"""Secrets in configs, files and logs: which names hold one, a config as it may be written to a file, the values to
blank out of log lines and printed configs, and the warning for a secret typed on the command line.

A name (an environment variable, or a config key) holds a secret when, ignoring case and trailing digits or
separators, it ends with TOKEN, KEY(S), SECRET(S), PASSWORD(S), PASSWD or CREDENTIAL(S): `HF_TOKEN`,
`WANDB_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`, `hfToken`, `API_KEY_2`; not `TOKENIZERS_PARALLELISM`,
`token_dtype`, `SSH_KEY_PATH`, `AWS_ACCESS_KEY_ID`. Only the end counts, because a training config names counts
and types after tokens (`token_dtype`, `eos_token_id`); a name such as `MONKEY` counts too, which costs only a
blanked value. Every leaf under a secret-named key is secret (`credentials.user`). Option names that end so
and name no secret are listed (NOT_SECRET_NAMES: `task.json_keys`, the record fields task=prepare_data reads).

A config written to a file keeps a value read from the environment as the interpolation it was typed as
(`${oc.env:HF_TOKEN}`, also through a reference to such a value), and shows any other secret-named value as `<redacted>`.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from omegaconf import OmegaConf

from primus_hydra.distributed_env import detect_distributed_env

REDACTED = "<redacted>"  # a plain YAML scalar, unlike "***" (an alias)
NOT_SECRET_NAMES = frozenset({"JSON_KEYS"})
SECRET_ENDINGS = ("TOKEN", "KEY", "KEYS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "CREDENTIAL",
                  "CREDENTIALS")
# values not blanked out of text: shorter ones, and these words, would blank out common words and numbers of
# every line, and are no credential anyone uses
MIN_REDACTED_LENGTH = 4
NOT_SECRET_VALUES = frozenset({"true", "false", "null", "none", "yes", "no", "auto"})

_TRAILING = re.compile(r"[\d_.\-]+$")
_ENV_RESOLVER = re.compile(r"\$\{\s*oc\.env\s*:")
_NODE_REFERENCE = re.compile(r"\$\{\s*(\.*[\w\-]+(?:\.[\w\-]+|\[\d+\])*)\s*\}")

LeafPath = tuple  # a leaf's keys from the root, as strings


@functools.lru_cache(maxsize=4096)  # a config's ~1,000 leaves share ~200 key names; asked per leaf, per path key
def is_secret_name(name: Any) -> bool:
    normalized = _TRAILING.sub("", str(name)).upper()
    return normalized.endswith(SECRET_ENDINGS) and normalized not in NOT_SECRET_NAMES


def is_secret_path(path: LeafPath) -> bool:
    return any(is_secret_name(key) for key in path)


def _leaves(node: Any, path: LeafPath = ()) -> Iterator[tuple[LeafPath, Any]]:
    """(path, value) of every leaf of a plain container."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, path + (str(key),))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _leaves(value, path + (str(index),))
    else:
        yield path, node


def _replace_leaves(node: Any, value_of: Callable[[LeafPath, Any], Any], path: LeafPath = ()) -> Any:
    if isinstance(node, dict):
        return {key: _replace_leaves(value, value_of, path + (str(key),)) for key, value in node.items()}
    if isinstance(node, list):
        return [_replace_leaves(value, value_of, path + (str(index),)) for index, value in enumerate(node)]
    return value_of(path, node)


class _TypedConfig:
    """A config as typed (interpolations unresolved), to tell which leaves read the environment."""

    def __init__(self, cfg: Any):
        self.raw = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)

    def node(self, path: LeafPath) -> Any:
        node = self.raw
        for key in path:
            node = node[int(key)] if isinstance(node, list) else node[key]
        return node

    def reads_environment(self, path: LeafPath, seen: frozenset = frozenset()) -> bool:
        """The leaf's interpolation uses oc.env, or refers to a node with a leaf that does."""
        text = self.node(path)
        if not isinstance(text, str) or "${" not in text:
            return False
        if _ENV_RESOLVER.search(text):
            return True
        for reference in _NODE_REFERENCE.findall(text):
            target = _referenced_path(reference, path)
            if target in seen:
                continue
            try:
                leaves = list(_leaves(self.node(target), target))
            except (KeyError, IndexError, ValueError, TypeError):
                continue
            if any(self.reads_environment(leaf, seen | {target}) for leaf, _ in leaves):
                return True
        return False


def _referenced_path(reference: str, leaf: LeafPath) -> LeafPath:
    """The absolute path of `${reference}` written in the leaf at `leaf` (OmegaConf's relative `.x`, `..x`)."""
    dots = len(reference) - len(reference.lstrip("."))
    keys = tuple(key for key in re.sub(r"\[(\d+)\]", r".\1", reference.lstrip(".")).split(".") if key)
    return (leaf[:-dots] if dots else ()) + keys


def config_for_file(cfg: Any, secret_value: Optional[Callable[[LeafPath, Any], Any]] = None) -> dict:
    """The config as plain data to write to a file: resolved, except that a value read from the environment stays
    the interpolation it was typed as; a secret-named value becomes `secret_value(path, value)` (default `<redacted>`)."""
    typed = _TypedConfig(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)

    def value_of(path: LeafPath, value: Any) -> Any:
        if typed.reads_environment(path):
            return typed.node(path)
        if is_secret_path(path) and value is not None:
            return secret_value(path, value) if secret_value else REDACTED
        return value

    return _replace_leaves(resolved, value_of)


def secret_values(cfg: Any = None, environ: Mapping[str, str] = os.environ, also: Iterable[str] = ()) -> set[str]:
    """What to blank out of text: the values of secret-named environment variables and config leaves (resolved;
    a leaf that does not resolve here is left out), and `also`."""
    values = {value for name, value in environ.items() if is_secret_name(name)} | set(also)
    if cfg is not None:
        for path, _ in _leaves(OmegaConf.to_container(cfg, resolve=False)):
            if is_secret_path(path):
                try:
                    values.add(str(OmegaConf.select(cfg, ".".join(path), throw_on_missing=True)))
                except Exception:  # noqa: BLE001 - an interpolation that needs what this process lacks
                    continue
    return {value for value in values if _could_be_a_credential(value)}


def _could_be_a_credential(value: str) -> bool:
    return len(value) >= MIN_REDACTED_LENGTH and value.lower() not in NOT_SECRET_VALUES


def holds_any(plain: Any, values: Iterable[str]) -> bool:
    """Whether a key or leaf of a plain container (dicts, lists, scalars) holds one of `values` (as text)."""
    values = [value for value in values if value]
    return bool(values) and any(value in str(part) for path, leaf in _leaves(plain) for part in (*path, leaf)
                                for value in values)


def redact_text(text: str, values: Iterable[str]) -> str:
    for value in sorted(values, key=len, reverse=True):  # longest first: a value inside another goes with it
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def literal_secret_overrides(args: Iterable[str]) -> list[tuple[str, str]]:
    """(key as typed, value) of each command-line override that gives a secret-named key a literal value (one
    without `${...}`) that could be a credential (not `1`, `true`, ...: `+model.stale_key=1` is no secret)."""
    found = []
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        value = value.strip("'\"")
        if is_secret_name(key.lstrip("+~").split("@")[0].rsplit(".", 1)[-1]) and "${" not in value \
                and _could_be_a_credential(value):
            found.append((key, value))
    return found


def warn_about_literal_secrets(args: Iterable[str]) -> None:
    """One warning line per secret typed on the command line: Hydra records overrides in the run dir as typed.
    Under a user's torchrun/srun only rank 0 warns."""
    if not detect_distributed_env().is_main:
        return
    for key, _ in literal_secret_overrides(args):
        name = key.split("@")[0].rsplit(".", 1)[-1]
        print(f"warning: {key.lstrip('+~')} is a secret typed on the command line: Hydra records it as typed in the "
              f"run dir's .hydra/overrides.yaml and .hydra/config.yaml (readable by you only); export {name} and "
              f"pass '{key}=${{oc.env:{name}}}' instead", file=sys.stderr, flush=True)


class _RedactingStream:
    def __init__(self, stream: Any, values: set[str]):
        self._stream = stream
        self._values = values

    def write(self, text: str) -> int:
        return self._stream.write(redact_text(text, self._values))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacted_stdout(args: Iterable[str]) -> Iterator[None]:
    """stdout with secret values blanked out, for a printed config (`--cfg job --resolve` resolves ${oc.env:...}):
    the values of secret-named environment variables and of secret-named keys given on the command line."""
    values = secret_values(also=[value for _, value in literal_secret_overrides(args)])
    original = sys.stdout
    sys.stdout = _RedactingStream(original, values)
    try:
        yield
    finally:
        sys.stdout = original
