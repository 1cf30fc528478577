"""A PyYAML loader's or dumper's implicit tags found once per scalar text: PyYAML matches every plain scalar against
its resolvers' regular expressions, once when it is read and twice when it is written (~700,000 times in task=import
over Primus's examples, mostly the same keys and values). A class without path resolvers, whose implicit resolvers
are fixed once it is defined, gets the same tag for the same text every time; it is kept after the first answer."""
from __future__ import annotations

from typing import Any

from yaml.nodes import ScalarNode

TAGS_KEPT = 65536


class ScalarTagsResolvedOnce:
    """Mixin, first among a PyYAML Loader's or Dumper's bases, for a class whose implicit resolvers are set when it
    is defined and never after (add_implicit_resolver on it later would not be seen for a text already asked)."""

    _tags_of_texts: dict = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._tags_of_texts = {}  # one table per class: each has its own resolvers

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not ScalarNode or self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)  # type: ignore[misc]
        tags = type(self)._tags_of_texts
        key = (value, implicit[0], implicit[1])
        tag = tags.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)  # type: ignore[misc]
            if len(tags) >= TAGS_KEPT:
                tags.clear()
            tags[key] = tag
        return tag
