"""`backend.extra_args` may pass any native argument through, except one the canonical config already owns:
`+backend.extra_args.micro_batch_size=0` would bypass every rule on module.micro_batch_size (and disagree with
what the orchestrator planned). Such a key is refused in one line naming the canonical key to set instead.

Owners are found from the translation itself, so no table can drift from it: the adapter translates the config
without extra_args, then once per canonical value (each number, switch, choice and string under model.*,
module.*, platform.* and the backend's own knobs) changed on its own; a native argument whose value moves with
a canonical key is owned by it. Parallel sizes are changed in the layout too, where the translation reads them.
Constants of the translation (dropouts, Megatron's `rotary_percent`, ...) have no owner and stay free to set.
A value the first translation never read cannot move anything, and is not changed (about half of them: each read
is recorded on the plain copy the translations run on, _ReadRecorder); and a variant runs again only the sections of
the translation that read the changed value (backends/translation_sections.py: the others' first results are kept).
This runs only when extra_args names an argument the translation produces (~50-100 translations, ~5-20 ms).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from primus_hydra.backends.translation_sections import SectionMemo
from primus_hydra.config.values import PlainTree, get_value, set_value, to_plain, value_set

PERTURBED_SECTIONS = ("model", "module", "platform", "backend")
NOT_CANONICAL = {"backend.extra_args", "backend._target_", "backend.name", "backend.path", "backend.trainer",
                 "platform.env"}


def owned_extra_args_failures(adapter) -> list[str]:
    """One line per extra_args entry that sets a native argument a canonical key owns."""
    extra = flatten(to_plain(adapter.cfg.backend.extra_args) or {})
    if not extra:
        return []
    owners = native_owners(adapter, list(extra))
    return [f"backend.extra_args.{path}={extra[path]}: backend={adapter.name} sets {path} from "
            f"{' and '.join(keys)}; set {'it' if len(keys) == 1 else 'them'} instead (extra_args passes through only "
            f"what the canonical config does not own)" for path, keys in owners.items() if keys]


def native_owners(adapter, paths: Optional[list[str]] = None, skip_unread: bool = True) -> dict[str, list[str]]:
    """{native path: the canonical keys that move it} for `paths` (None: every path of the translation) that the
    translation without extra_args produces. skip_unread=False: every canonical key is tried, also those the
    translation never read (the same owners, at about twice the cost: tests/unit/test_extra_args_owners.py)."""
    # the translations run on a plain copy (attribute reads on plain dicts cost a fraction of OmegaConf's, and no
    # deep copy of the config is needed) where it translates exactly as the config does; else on a copy of the
    # config, as does a variant the plain copy cannot translate
    light = PlainTree.of(adapter.cfg)
    plain_translates = _translate(adapter, light, adapter.layout) == _translate(adapter, adapter.cfg, adapter.layout)
    light.backend["extra_args"] = {}
    base = light if plain_translates else _without_extra_args(adapter.cfg)
    reads = _Reads()
    recorded = skip_unread and base is light
    memo = None
    if recorded:  # each section's reads and result kept: a variant runs again only the sections it can move
        recorder = _ReadRecorder.over(base, reads)
        memo = SectionMemo(reads, _subtree_paths(recorder, base))
        with memo.recording():
            baseline = _translate(adapter, recorder, adapter.layout)
    else:
        baseline = _translate(adapter, base, adapter.layout)
    if baseline is None:
        return {}
    wanted = [path for path in (baseline if paths is None else paths) if path in baseline]
    owners: dict[str, list[str]] = {path: [] for path in wanted}
    tops = frozenset(path.split(".", 1)[0] for path in wanted)
    config_base = None
    unread = reads.unread_test() if recorded else lambda key: False
    for key, variant, layout in _variants(base, adapter.layout, unread) if wanted else ():
        # (a translation that changes a section's kept result raises, and is translated from the config below)
        with memo.replaying(_not_reading(key)) if memo is not None else contextlib.nullcontext():
            translated = _translate(adapter, variant, layout, tops)
        if translated is None and plain_translates:
            if config_base is None:
                config_base = _without_extra_args(adapter.cfg)
            translated = _translate_changed(adapter, config_base, key, variant, layout, tops)
        if translated is None:
            continue
        for path in wanted:
            if translated.get(path, _ABSENT) != baseline[path]:
                owners[path].append(key)
    return owners


def _not_reading(key: str) -> Callable[["_Reads"], bool]:
    prefixes = _prefixes(key)
    return lambda section_reads: not section_reads.has_read(key, prefixes)


def _subtree_paths(*trees: PlainTree) -> Callable[[Any], Optional[str]]:
    """A subtree of any of `trees` (the same config: recorded, and plain) -> its dotted path ("": the root)."""
    paths: dict[int, str] = {}

    def walk(tree: dict, path: str) -> None:
        paths[id(tree)] = path
        for key, value in dict.items(tree):  # dict's own: a _ReadRecorder's items() would record a read
            if isinstance(value, dict):
                walk(value, f"{path}.{key}" if path else str(key))

    for tree in trees:
        walk(tree, "")
    return lambda subtree: paths.get(id(subtree))


def _without_extra_args(cfg: DictConfig) -> DictConfig:
    base = copy.deepcopy(cfg)
    with open_dict(base.backend):
        base.backend.extra_args = {}
    with contextlib.suppress(Exception):  # each translation would otherwise parse every interpolation again
        OmegaConf.resolve(base)
    return base


_ABSENT = object()


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts (torchtitan's sections) as dotted paths; other values are leaves."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


def _translate(adapter, cfg: DictConfig, layout, tops: Optional[frozenset] = None) -> Optional[dict]:
    """The translation as dotted paths (flatten); with `tops`, only the native entries of those names (a native
    name holds no dot: Megatron's arguments, torchtitan's sections), each made plain: the rest is ~a third of a
    variant's cost."""
    try:
        # a job prepared before its run dir is known (a Slurm sweep) is translated with a stand-in: only names move
        run_dir = adapter.run_dir or Path("run_dir")
        native = type(adapter)(cfg=cfg, layout=layout, run_dir=run_dir).convert_config()
    except Exception:  # noqa: BLE001 - a changed value the translation cannot take tells nothing
        return None
    return flatten(to_plain(native if tops is None else {key: native[key] for key in tops if key in native}))


def _translate_changed(adapter, cfg: DictConfig, key: str, light: PlainTree, layout,
                       tops: frozenset) -> Optional[dict]:
    """The translation of `cfg` (its `tops` entries) with `key` set as in the plain variant `light`, or None."""
    try:
        with value_set(cfg, key, get_value(light, key)):
            return _translate(adapter, cfg, layout, tops)
    except Exception:  # noqa: BLE001 - a value the schema refuses is not a variant
        return None


def _variants(cfg: Any, layout, unread: Callable[[str], bool]) -> Iterator[tuple[str, Any, Any]]:
    """(canonical key, the config with only that value changed, the layout that goes with it): `cfg` itself,
    changed for the moment and restored when the caller asks for the next one (a copy each would cost more than
    the translation). A key the translation did not read (`unread`) cannot move what it makes: left out, unless it
    changes the layout too."""
    parallel_fields = {f.name for f in dataclasses.fields(layout)}
    for key, value in list(_canonical_leaves(cfg)):
        changed = _changed(value)
        if changed is _ABSENT:
            continue
        field = key.rsplit(".", 1)[-1]
        parallel = key.startswith("module.parallel.") and field in parallel_fields
        if unread(key) and not parallel:
            continue
        try:
            set_value(cfg, key, changed)
        except Exception:  # noqa: BLE001 - a value the schema refuses is not a variant
            continue
        try:
            yield key, cfg, dataclasses.replace(layout, **{field: changed}) if parallel else layout
        finally:
            set_value(cfg, key, value)


def _canonical_leaves(cfg: Any) -> Iterator[tuple[str, Any]]:
    for section in PERTURBED_SECTIONS:
        yield from _leaves(cfg[section], section)


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    for key in list(node.keys()):
        path = f"{prefix}.{key}"
        if path in NOT_CANONICAL:
            continue
        child = node._get_node(key) if isinstance(node, DictConfig) else node[key]
        if isinstance(child, (DictConfig, PlainTree)):
            yield from _leaves(node[key], path)
        elif not (OmegaConf.is_list(child) or isinstance(child, list)):
            yield path, node[key]


def _changed(value: Any) -> Any:
    if value is None:
        return _ABSENT  # no value to move away from that the schema would surely take
    if isinstance(value, enum.Enum):
        others = [member for member in type(value) if member != value]
        return others[0] if others else _ABSENT
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 0.125
    if isinstance(value, str):
        return value + "_changed"
    return _ABSENT


class _Reads:
    """The dotted keys a translation read through a _ReadRecorder: each value read, and each subtree read whole
    (iterated, compared, printed); also into the read set of each section under way (backends/translation_sections.py)."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.wholes: set[str] = set()
        self._sections: list[_Reads] = []

    def read(self, key: str) -> None:
        self.values.add(key)
        for section in self._sections:
            section.values.add(key)

    def read_whole(self, key: str) -> None:
        self.wholes.add(key)
        for section in self._sections:
            section.wholes.add(key)

    def section(self) -> "_Reads":
        """The read set of a section starting now (until end_section)."""
        self._sections.append(_Reads())
        return self._sections[-1]

    def end_section(self) -> None:
        self._sections.pop()

    def has_read(self, key: str, prefixes: Optional[tuple[str, ...]] = None) -> bool:
        """Whether `key` was read (`prefixes`: _prefixes(key), where the caller asks for one key many times)."""
        if key in self.values:
            return True
        return bool(self.wholes) and any(prefix in self.wholes for prefix in prefixes or _prefixes(key))

    def unread_test(self) -> Callable[[str], bool]:
        return lambda key: not self.has_read(key)


def _prefixes(key: str) -> tuple[str, ...]:
    """"" and each dotted prefix of `key`, itself excluded ("a.b.c": "", "a", "a.b")."""
    parts = key.split(".")
    return tuple(".".join(parts[:end]) for end in range(len(parts)))


def _read_whole(method: Callable) -> Callable:
    def recorded(self: "_ReadRecorder", *args: Any) -> Any:
        self._whole()
        return method(self, *args)

    recorded.__name__ = method.__name__
    return recorded


class _ReadRecorder(PlainTree):
    """A PlainTree that records in `reads` what the code given it reads. Everything dict offers to read a value
    with is recorded; iterating, comparing or printing a subtree records it whole. (Overriding __iter__ also
    turns CPython's copies and `**` of the dict away from its storage, through keys() and __getitem__.)"""

    __slots__ = ("_reads", "_prefix")

    @classmethod
    def over(cls, tree: PlainTree, reads: _Reads, prefix: str = "") -> "_ReadRecorder":
        recorder = cls({key: cls.over(value, reads, f"{prefix}{key}.") if isinstance(value, PlainTree) else value
                        for key, value in tree.items()})
        recorder._reads, recorder._prefix = reads, prefix
        return recorder

    def _read(self, key: Any) -> None:
        self._reads.read(f"{self._prefix}{key}")

    def _whole(self) -> None:
        self._reads.read_whole(self._prefix[:-1])

    def __getitem__(self, key: Any) -> Any:
        self._read(key)
        return dict.__getitem__(self, key)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        self._read(name)
        return PlainTree.__getattr__(self, name)

    def get(self, key: Any, default: Any = None) -> Any:
        self._read(key)
        return dict.get(self, key, default)

    # each way dict gives all its values away: the subtree is read whole
    __iter__, keys, items, values, copy, __eq__, __ne__, __repr__, __reduce_ex__ = (
        _read_whole(getattr(dict, name))
        for name in ("__iter__", "keys", "items", "values", "copy", "__eq__", "__ne__", "__repr__", "__reduce_ex__"))
    copied = _read_whole(PlainTree.copied)
    __hash__ = None  # type: ignore[assignment]
