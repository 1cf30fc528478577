"""util/yaml_tags.py: a scalar's implicit tag, kept per text, is the tag PyYAML's resolvers give it."""
from __future__ import annotations

import pytest
import yaml
from yaml.nodes import MappingNode, ScalarNode

from primus_hydra.migrate import emit, source_files
from primus_hydra.util.yaml_tags import ScalarTagsResolvedOnce

TEXTS = ["", "x", "1", "1.5", "1e-4", "1.0e-4", ".inf", "-.Inf", ".nan", "nan", "true", "True", "yes", "no", "on",
         "null", "~", "Null", "0x1f", "0o17", "017", "1_000", "1:20", "2026-12-06", "<<", "=", "-", "+1", "a b",
         "${oc.env:HOME}", "'q'"]


@pytest.mark.parametrize("kept, shipped", [(emit._Dumper, getattr(yaml, "CSafeDumper", yaml.SafeDumper)),
                                           (emit._ReadBack, getattr(yaml, "CSafeLoader", yaml.SafeLoader)),
                                           (source_files._SourceLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))])
def test_each_text_gets_the_tag_pyyamls_resolvers_give_it_asked_once_or_again(kept, shipped):
    instance = kept("") if "Loader" in shipped.__name__ else kept(None)
    for _ in range(2):  # the first answer is kept; the second comes from the table
        for text in TEXTS:
            for implicit in ((True, False), (False, True), (True, True), (False, False)):
                uncached = super(ScalarTagsResolvedOnce, instance).resolve(ScalarNode, text, implicit)
                assert instance.resolve(ScalarNode, text, implicit) == uncached, (kept.__name__, text, implicit)
    assert instance.resolve(MappingNode, None, None) == "tag:yaml.org,2002:map"


def test_each_class_keeps_its_own_table():
    class Strict(ScalarTagsResolvedOnce, yaml.SafeLoader):
        pass

    class Plain(ScalarTagsResolvedOnce, yaml.BaseLoader):  # no implicit resolvers: every plain scalar is a str
        pass

    assert Strict("").resolve(ScalarNode, "1", (True, False)) == "tag:yaml.org,2002:int"
    assert Plain("").resolve(ScalarNode, "1", (True, False)) == "tag:yaml.org,2002:str"
    assert Strict._tags_of_texts is not Plain._tags_of_texts is not ScalarTagsResolvedOnce._tags_of_texts


def test_what_it_writes_and_reads_back_is_the_same_with_the_table():
    tree = {text or "empty": text for text in TEXTS} | {"n": 1, "f": 1e-4, "b": True, "none": None, "l": [1, "1"]}
    written = emit.yaml_ready(tree, "t")
    texts = [emit.dump(written, "t") for _ in range(2)]  # each read back and compared by dump itself
    assert texts[0] == texts[1] and emit.same_value(yaml.load(texts[1], Loader=emit._ReadBack), written)  # noqa: S506


def whole_text(tree) -> str:
    return yaml.dump(tree, Dumper=emit._Dumper, sort_keys=False, default_flow_style=False, width=120,
                     allow_unicode=True)


EDGES = {"multi": "line one\nline two\n", "kept_newlines": "x\n\n\n", "spaces": "  lead and trail  ",
         "long": "word " * 60, "unicode": "caf\u00e9 \u2713", "empty_dict": {}, "empty_list": [], "none": None,
         "nested": {"a": {"b": [1, {"c": "d"}, []]}, "e": "1e-4"}, "quoted": "null", "colon": "a: b", "hash": "# x",
         "tab": "a\tb", "nan": float("nan"), "inf": float("-inf"), "interpolation": emit.Interpolation("${oc.env:X}")}


def test_a_mappings_text_is_its_entries_texts_one_after_another():
    written = emit.yaml_ready(EDGES, "t")
    assert emit.dump(written, "t") == whole_text(written)
    assert emit.same_value(yaml.load(emit.dump(written, "t"), Loader=emit._ReadBack), written)  # noqa: S506
    for value in ([1, 2], "text", 3, {}):  # not a mapping with entries: dumped whole
        assert emit.dump(value, "t") == whole_text(value)


def test_an_entry_met_again_is_its_kept_text_and_an_entry_of_another_type_is_its_own(monkeypatch):
    monkeypatch.setattr(emit, "_dumps", {})
    dumped = []
    real_dump = yaml.dump
    monkeypatch.setattr(emit.yaml, "dump", lambda *args, **kwargs: dumped.append(1) or real_dump(*args, **kwargs))
    trees = [{"a": 1, "b": [1, "x"]}, {"a": 1.0, "b": [1, "x"]}, {"a": True, "b": [1, "x"]},
             {"a": "1", "b": [1, "x"]}, {"b": [1, "x"], "a": 1}, {"a": 1, "b": [1, emit.Interpolation("x")]}]
    texts = [emit.dump(emit.yaml_ready(tree, "t"), "t") for tree in trees]
    distinct = 6  # a=1, a=1.0, a=True, a="1", b=[1, "x"] and b=[1, Interpolation("x")] (written as the other)
    assert len(dumped) == distinct and texts == [whole_text(emit.yaml_ready(tree, "t")) for tree in trees]
    again = [emit.dump(emit.yaml_ready(dict(tree), "t"), "t") for tree in trees]  # equal trees, other objects
    assert again == texts and len(dumped) == distinct + len(trees)  # whole_text's own dumps above
    for tree, text in zip(trees, texts):
        assert emit.same_value(yaml.load(text, Loader=emit._ReadBack), tree)  # noqa: S506
