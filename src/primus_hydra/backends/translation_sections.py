"""The sections of a backend's translation (Megatron's model, MoE, training, parallel ... arguments; torchtitan's and
MaxText's sections), marked with @translation_section, so that the extra_args owner search
(backends/extra_args_owners.py) translates again only what a changed value can move.

The owner search translates the config once, recording each value a section reads, then once per canonical value
changed alone (~50 translations). A section is a deterministic function of what it is given: a section that did not
read the changed value, given the same subtrees and equal other arguments (the layout, a path), runs as it ran the
first time, so its first result is handed back instead of running it again; read-only: a translation that changes it
raises SectionResultChanged, and the owner search translates that variant from the config, as any variant the plain
copy cannot translate.
Outside an owner search a section is a plain call. A section called from inside another is part of the outer one.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable, Iterator, Optional

# the owner search's, while it translates (per thread: a search elsewhere never sees it)
_memo: contextvars.ContextVar[Optional["SectionMemo"]] = contextvars.ContextVar("translation_section_memo",
                                                                                 default=None)


def translation_section(function: Callable) -> Callable:
    @functools.wraps(function)
    def section(*args: Any) -> Any:
        memo = _memo.get()
        if memo is None:
            return function(*args)
        return memo.call(function, args)

    return section


class SectionMemo:
    """Each top-level section call of the first translation: (what it was given, what it read, its result), by the
    function and the call's rank among its calls; then, for a translation with `key` changed, those results for
    the calls given the same that did not read `key`."""

    def __init__(self, reads: Any, tree_path: Callable[[Any], Optional[str]]) -> None:
        self.reads = reads  # extra_args_owners._Reads of the first translation: a section's reads are recorded too
        self.tree_path = tree_path  # a config subtree -> its dotted path (None: not one of the config's)
        self.entries: dict[tuple, _Entry] = {}  # (function, rank) -> its first call
        self.unread: Optional[Callable[[Any], bool]] = None  # (the recorded reads) -> whether the changed key is unread
        self.counts: dict[Callable, int] = {}
        self.depth = 0

    def recording(self) -> contextlib.AbstractContextManager:
        """The first translation, inside the block: each section's call kept."""
        return self._active(None)

    def replaying(self, unread: Callable[[Any], bool]) -> contextlib.AbstractContextManager:
        """A variant's translation, inside the block: the kept calls given the same whose reads are `unread`."""
        return self._active(unread)

    @contextlib.contextmanager
    def _active(self, unread: Optional[Callable[[Any], bool]]) -> Iterator["SectionMemo"]:
        self.unread, self.counts = unread, {}
        token = _memo.set(self)
        try:
            yield self
        finally:
            _memo.reset(token)

    def call(self, function: Callable, args: tuple) -> Any:
        if self.depth:  # inside another section: part of it
            return function(*args)
        rank = self.counts[function] = self.counts.get(function, -1) + 1
        if self.unread is not None:
            entry = self.entries.get((function, rank))
            if entry is not None and self.unread(entry.reads) and entry.given(args, self._signature):
                return entry.result
            return self._run(function, args)
        section_reads = self.reads.section()
        try:
            result = self._run(function, args)
        finally:
            self.reads.end_section()
        signature = self._signature(args)
        if signature is not None:
            self.entries[(function, rank)] = _Entry(signature, section_reads, frozen(result), args)
        return result

    def _run(self, function: Callable, args: tuple) -> Any:
        self.depth += 1
        try:
            return function(*args)
        finally:
            self.depth -= 1

    def _signature(self, args: tuple) -> Optional[tuple]:
        """Each argument as a subtree's path, or as itself (compared by ==); None where a dict is not the config's."""
        signature = []
        for arg in args:
            if isinstance(arg, dict):
                path = self.tree_path(arg)
                if path is None:
                    return None
                signature.append(("tree", path))
            else:
                signature.append(("value", arg))
        return tuple(signature)


class _Entry:
    """A section call of the first translation: what it was given, what it read, its result (frozen)."""

    __slots__ = ("signature", "reads", "result", "last_given")

    def __init__(self, signature: tuple, reads: Any, result: Any, given: tuple) -> None:
        self.signature, self.reads, self.result, self.last_given = signature, reads, result, given

    def given(self, args: tuple, signature: Callable[[tuple], Optional[tuple]]) -> bool:
        """Whether `args` are what the first call was given: the same objects as the last such, else by signature."""
        if len(args) == len(self.last_given) and all(arg is known for arg, known in zip(args, self.last_given)):
            return True
        if signature(args) != self.signature:
            return False
        self.last_given = args
        return True


class SectionResultChanged(TypeError):
    """A translation changed a section's result handed back from the first translation."""


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise SectionResultChanged("a section's kept result is read-only")


class _FrozenDict(dict):
    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _refuse  # type: ignore


class _FrozenList(list):
    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = \
        __iadd__ = __imul__ = _refuse  # type: ignore


def frozen(value: Any) -> Any:
    """A copy of a section's result whose dicts and lists refuse changes (SectionResultChanged)."""
    if isinstance(value, dict):
        return _FrozenDict({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return _FrozenList(frozen(item) for item in value)
    return value
