"""Files task=import writes into a Hydra config dir: data only, whatever text the Primus files held.

Every key and value goes through the YAML emitter, which quotes any text OmegaConf's loader would read as something
else (`1e-4`, `1:20`, `null`, `<<`); `${` in text is escaped (OmegaConf would resolve it); a comment is one line
with its control characters escaped. The only interpolations a generated file holds are the environment reads the
importer writes itself: `${oc.env:VAR,'default'}`, or `${oc.decode:${oc.env:VAR,default}}` where the variable holds
a number, a boolean or null. A key Hydra would act on (`hydra`, `_target_` and Hydra's other `_x_` keys) is
refused in one line naming it. The text is read back with OmegaConf's loader and compared with what was meant
before anything is written.
"""
from __future__ import annotations

import math
import pickle
import re
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf._utils import get_yaml_loader

from primus_hydra.config.secrets import is_secret_name
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.primus_yaml import ENV_REFERENCE, EnvString, EnvValue
from primus_hydra.util.omegaconf_text import escape_text
from primus_hydra.util.yaml_tags import ScalarTagsResolvedOnce

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HYDRA_KEY = re.compile(r"hydra|_[A-Za-z]+_")  # hydra's node, _target_, _recursive_, _convert_, _args_, _partial_
_LOADER = get_yaml_loader()


class Interpolation(str):
    """Text the importer wrote as an interpolation on purpose (an environment read): emitted as it is."""


class _Dumper(ScalarTagsResolvedOnce, getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """The safe dumper (libyaml's emitter where PyYAML has it), knowing what OmegaConf's loader reads as a
    non-string (its float rule is wider)."""


_Dumper.yaml_implicit_resolvers = {key: list(value) for key, value in _LOADER.yaml_implicit_resolvers.items()}
_Dumper.add_representer(Interpolation, lambda dumper, data: dumper.represent_str(str(data)))


class _ReadBack(ScalarTagsResolvedOnce, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """OmegaConf's loader's scalar rules on libyaml's parser, for reading back what `dump` wrote (a fraction of the
    pure-Python parser's time; a dumped dict has no duplicate keys for OmegaConf's loader to refuse)."""


_ReadBack.yaml_implicit_resolvers = {key: list(value) for key, value in _LOADER.yaml_implicit_resolvers.items()}


def quoted(text: str) -> str:
    """An OmegaConf grammar string literal ('...') whose value is `text`."""
    return "'" + re.sub(r"(\\*)(\$\{|'|\Z)",
                        lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), text) + "'"


def _decode_text(value: Any) -> str | None:
    """Text that OmegaConf's oc.decode turns into `value` exactly (None: no such text)."""
    if value is None:
        candidates = ["null"]
    elif isinstance(value, bool):
        candidates = ["true" if value else "false"]
    elif isinstance(value, (int, float)):
        candidates = [repr(value)]
    elif isinstance(value, str):
        candidates = [value, quoted(value)]  # as it is where it decodes to itself, else a quoted literal
    else:
        return None
    for text in candidates:
        try:
            decoded = OmegaConf.create({"x": "${oc.decode:" + quoted(text) + "}"}).x
        except Exception:  # noqa: BLE001 - text oc.decode cannot parse (``, `a,b`): try the next
            continue
        if same_value(decoded, value):
            return text
    return None


def _checked_name(var: str, where: str) -> str:
    if not ENV_NAME.fullmatch(var):
        raise PrimusError(f"{where}: ${{{var}...}} reads an environment variable of a name a shell cannot set, and "
                          f"it is set here; not imported")
    return var


def env_read(value: EnvValue, where: str) -> Interpolation:
    """`${VAR:default}` as an OmegaConf environment read that gives what Primus gives with VAR unset, decoded so
    that the variable's text is typed as Primus types it (but for the text the two type differently: `+5`,
    `1_000`, `nan`, `NULL`, `007`); a variable named as a secret is passed as its text."""
    if not ENV_NAME.fullmatch(value.var) and not value.from_environment:
        return yaml_ready(value.value, where)  # `${oc.env:X}` in a Primus file is Primus's ${VAR:default}: the default
    var = _checked_name(value.var, where)
    if value.default is None:  # `${VAR}`: required, as Primus requires it
        form = "${oc.env:" + var + "}"
        return Interpolation(form if isinstance(value.value, str) else "${oc.decode:" + form + "}")
    text = _decode_text(value.unset_value)
    if isinstance(value.unset_value, str) and is_secret_name(var):  # a token is passed as the text it is
        return Interpolation("${oc.env:" + var + "," + quoted(value.unset_value) + "}")
    if text is None:  # Primus's types all have a decodable text; kept as a guard
        raise PrimusError(f"{where}: ${{{var}:{value.default}}} cannot be written as an environment read")
    return Interpolation("${oc.decode:${oc.env:" + var + "," + quoted(text) + "}}")


def env_string(value: EnvString, where: str) -> Interpolation:
    """Text with `${VAR:default}` inside, as OmegaConf string interpolation of the same environment reads."""
    parts, last = [], 0
    for match in ENV_REFERENCE.finditer(value.template):
        # backslashes right before an interpolation escape it in OmegaConf: doubled, they stay backslashes
        parts.append(re.sub(r"(\\+)\Z", r"\1\1", escape_text(value.template[last:match.start()])))
        var, default = match.group(1), match.group(2)
        if not ENV_NAME.fullmatch(var) and default is not None and not value.from_environment:
            parts.append(escape_text(default))  # no variable a shell can set: Primus uses the default
        else:
            var = _checked_name(var, where)
            parts.append("${oc.env:" + var + ("," + quoted(default) if default is not None else "") + "}")
        last = match.end()
    parts.append(escape_text(value.template[last:]))
    return Interpolation("".join(parts))


def check_key(key: Any, where: str) -> str:
    if not isinstance(key, str):
        raise PrimusError(f"{where}: the key {key!r} is not text; not imported")
    if HYDRA_KEY.fullmatch(key):
        raise PrimusError(f"{where}.{key}: a key Hydra would act on (`{key}`); a generated config never holds one, "
                          f"so this file is not imported")
    return key


def yaml_ready(value: Any, where: str) -> Any:
    """The tree as it is written: env values as environment reads, other text escaped, every key checked."""
    if isinstance(value, EnvValue):
        return env_read(value, where)
    if isinstance(value, EnvString):
        return env_string(value, where)
    if isinstance(value, Interpolation):
        return value
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {check_key(key, where): yaml_ready(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [yaml_ready(item, f"{where}[{index}]") for index, item in enumerate(value)]
    return value


DUMPS_KEPT = 16384
_dumps: dict[bytes, str] = {}  # a (key, value) entry's pickle -> its checked text (this process's)


def dump(tree: dict, where: str) -> str:
    """YAML text of a yaml_ready tree, checked by reading it back as OmegaConf does. A mapping's text is its
    entries' texts one after another (block style: each entry starts a line at column 0, and its text does not
    depend on what follows), each dumped and checked once per process: an entry met again is its kept text (equal
    pickles are equal values of the same types). Primus's resolved modules share most of their ~400 entries with
    one another: ~1 ms a file instead of ~10."""
    if not isinstance(tree, dict) or not tree:
        return _checked_text(tree, where)
    return "".join(_entry_text(key, value, where) for key, value in tree.items())


def _entry_text(key: str, value: Any, where: str) -> str:
    try:
        memo = pickle.dumps((key, value), pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a value pickle cannot hold: dumped, not kept
        return _checked_text({key: value}, where)
    text = _dumps.get(memo)
    if text is None:
        text = _checked_text({key: value}, where)
        if len(_dumps) >= DUMPS_KEPT:
            _dumps.clear()
        _dumps[memo] = text
    return text


def _checked_text(tree: Any, where: str) -> str:
    text = yaml.dump(tree, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
    if not same_value(yaml.load(text, Loader=_ReadBack), tree):  # noqa: S506 - a safe loader
        raise PrimusError(f"{where}: a value does not survive being written as YAML; not imported")
    return text


def same_value(a: Any, b: Any) -> bool:
    """Equal, with the same types (1, 1.0 and True differ; NaN equals NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same_value(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def comment(text: str) -> str:
    """`# text` on one line: line breaks and other control characters escaped."""
    return "# " + "".join(char if char.isprintable() or char == " " else repr(char)[1:-1] for char in str(text))
