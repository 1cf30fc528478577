"""config/fast_node_classes.py: OmegaConf's node classes answer isinstance/issubclass as ABCMeta did, and its tree
walks leave the parents and flag caches OmegaConf's own leave."""
from __future__ import annotations

import abc
import copy
import enum

import omegaconf
import pytest
from omegaconf import AnyNode, DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.base import Box, Container, Node

from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition, fast_node_classes
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir

fast_composition.install()


def _node_classes():
    found, pending = [], [Node]
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("omegaconf") and cls not in found:
            found.append(cls)
            pending.extend(cls.__subclasses__())
    return found


class _Color(enum.Enum):
    RED = 1


def _instances():
    return [DictConfig({"a": 1}), ListConfig([1]), AnyNode(1), omegaconf.StringNode("x"), omegaconf.IntegerNode(1),
            omegaconf.FloatNode(1.0), omegaconf.BooleanNode(True), omegaconf.EnumNode(enum_type=_Color),
            omegaconf.PathNode("a"), omegaconf.BytesNode(b"a"), 1, "x", None, {"a": 1}, [1], object()]


def test_every_node_class_is_checked_by_its_mro_and_answers_as_abcmeta_did():
    classes = _node_classes()
    assert len(classes) >= 15 and all(type(cls) is fast_node_classes.NodeClass for cls in classes)
    for cls in classes:
        for instance in _instances():
            assert isinstance(instance, cls) == abc.ABCMeta.__instancecheck__(cls, instance), (cls, instance)
        for other in classes + [int, dict, object]:
            assert issubclass(other, cls) == abc.ABCMeta.__subclasscheck__(cls, other), (cls, other)


def test_abstract_node_classes_still_refuse_instantiation_and_a_later_class_gets_the_metaclass():
    for abstract in (Node, Box, Container):
        with pytest.raises(TypeError, match="abstract"):
            abstract()

    class LaterNode(AnyNode):
        pass

    assert type(LaterNode) is fast_node_classes.NodeClass and isinstance(LaterNode(1), Box) is False
    assert isinstance(LaterNode(1), Node)


def test_a_class_with_a_registered_virtual_subclass_keeps_abcmeta():
    class Checked(abc.ABC):  # noqa: B024 - a class to register with
        pass

    class Hooked(abc.ABC):  # noqa: B024
        @classmethod
        def __subclasshook__(cls, other):
            return True

    Checked.register(int)
    assert fast_node_classes._answered_by_its_mro(Checked) is False and isinstance(1, Checked)
    assert fast_node_classes._answered_by_its_mro(Hooked) is False and isinstance(1, Hooked)
    assert fast_node_classes._answered_by_its_mro(DictConfig) is True


def _tree_state(node, path="cfg"):
    """Each node's parent (as a path) and its cached flags, walking the tree."""
    yield path, id(node._get_parent()) if node._get_parent() is not None else None, node.__dict__.get("_flags_cache")
    content = node.__dict__.get("_content")
    if isinstance(node, (DictConfig, ListConfig)) and isinstance(content, (dict, list)):
        for key, child in (content.items() if isinstance(content, dict) else enumerate(content)):
            yield from _tree_state(child, f"{path}.{key}")


def test_re_parenting_and_flag_invalidation_leave_what_omegaconfs_own_leave():
    register_schemas()
    cfg = compose_job_config(find_conf_dir(), "config", ["backend=megatron", "model=llama3_8b"])
    with open_dict(cfg):
        cfg.extra = OmegaConf.create({"listed": [1, {"x": None}], "none": None})
    OmegaConf.set_readonly(cfg.model, True)  # a cached flag or two to invalidate
    assert cfg.model._get_flag("readonly") and cfg.extra.listed._get_flag("struct") is not None
    ours, theirs = copy.deepcopy(cfg), copy.deepcopy(cfg)
    for node in (ours, theirs):  # detach every child, as a merge may leave them
        for child in node.__dict__["_content"].values():
            child.__dict__["_parent"] = None
    ours._re_parent()
    Box._re_parent.__wrapped__(theirs)
    assert [state[1:] for state in _tree_state(ours)] != [] and _parents_are_right(ours)
    assert [(path, flags) for path, _, flags in _tree_state(ours)] == [(p, f) for p, _, f in _tree_state(theirs)]
    ours.model._invalidate_flags_cache()
    Container._invalidate_flags_cache.__wrapped__(theirs.model)
    assert [(path, flags) for path, _, flags in _tree_state(ours)] == [(p, f) for p, _, f in _tree_state(theirs)]


def _parents_are_right(node):
    content = node.__dict__.get("_content")
    if isinstance(node, (DictConfig, ListConfig)) and isinstance(content, (dict, list)):
        for child in (content.values() if isinstance(content, dict) else content):
            if child._get_parent() is not node or not _parents_are_right(child):
                return False
    return True
