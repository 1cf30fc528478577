"""YAML written by libyaml's C emitter (PyYAML's `CSafeDumper`): the same text as `yaml.safe_dump`, ~5x faster.
A dry run writes the composed config three times and the job config once (~40 ms with the pure-Python emitter).
Where PyYAML was built without libyaml, the pure-Python dumper writes it. Each scalar's implicit tag is found once
per text (util/yaml_tags.py): the same keys and values recur in every file a run writes."""
from __future__ import annotations

from typing import Any

import yaml

from primus_hydra.util.yaml_tags import ScalarTagsResolvedOnce


class SafeDumperResolvingTagsOnce(ScalarTagsResolvedOnce, getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    pass


SAFE_DUMPER = SafeDumperResolvingTagsOnce


def dump_yaml(value: Any, **options: Any) -> str:
    """`yaml.safe_dump(value, **options)`, by the C emitter."""
    return yaml.dump(value, Dumper=SAFE_DUMPER, **options)


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load(text)` of a file this project wrote, by libyaml's C parser."""
    return yaml.load(text, Loader=SAFE_LOADER)
