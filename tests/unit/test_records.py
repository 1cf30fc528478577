"""@record makes the dataclass @dataclass makes, by the same arguments: fields, defaults, factories, __init__ (by
position and keyword), __post_init__, __eq__, __repr__, hashing, frozen assignment, dataclasses.replace/asdict and
OmegaConf's reading of a schema; the wrong arguments refused as TypeError."""
from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import FrozenInstanceError, field
from typing import List, Optional

import pytest
from omegaconf import MISSING, OmegaConf

from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.orchestrator.resources import MachineResources
from primus_hydra.util.records import record


@record
class Inner:
    size: int = 4


def make_point(decorate, name: str):
    """The same class body under `decorate` (@record or @dataclass, each plain and frozen), as a module-level class
    named `name` (which pickle finds)."""

    class Point:
        x: int
        y: float = 0.5
        tags: List[str] = field(default_factory=lambda: ["a"])
        inner: Inner = field(default_factory=Inner)
        note: Optional[str] = field(default=None, compare=False, repr=False)
        seen: int = field(default=0, init=False)

        def __post_init__(self):
            object.__setattr__(self, "seen", self.x + 1)

    Point.__name__ = Point.__qualname__ = name
    globals()[name] = decorate(Point)
    return globals()[name]


CASES = {"plain": (make_point(record, "PlainRecord"), make_point(dataclasses.dataclass, "PlainDataclass")),
         "frozen": (make_point(record(frozen=True), "FrozenRecord"),
                    make_point(dataclasses.dataclass(frozen=True), "FrozenDataclass"))}


@pytest.mark.parametrize("case", list(CASES))
def test_it_behaves_as_the_dataclass_the_standard_decorator_makes(case):
    ours, standard = CASES[case]
    assert [spec.name for spec in dataclasses.fields(ours)] == [spec.name for spec in dataclasses.fields(standard)]
    for args, kwargs in (((1,), {}), ((1, 2.0), {}), ((), {"x": 3, "note": "n"}), ((1,), {"tags": ["b"]})):
        made, reference = ours(*args, **kwargs), standard(*args, **kwargs)
        assert dataclasses.asdict(made) == dataclasses.asdict(reference)
        assert vars(made) == vars(reference) and list(vars(made)) == list(vars(reference))
        assert repr(made).split("(", 1)[1] == repr(reference).split("(", 1)[1]
        assert made == ours(*args, **{**kwargs, "note": "not compared"}) and made != ours(99)
        assert (made == reference) is False  # another class, as dataclasses compare
        assert dataclasses.replace(made, y=7.0) == ours(*args[:1], **{**kwargs, "y": 7.0})
        assert copy.deepcopy(made) == made and pickle.loads(pickle.dumps(made)) == made
    assert ours(1).tags is not ours(1).tags  # a factory per instance
    assert ours(float("nan")) != ours(float("nan"))
    for args, kwargs in (((), {}), ((1, 2, ["t"], Inner(), "n", 5), {}), ((1,), {"x": 2}), ((1,), {"z": 2})):
        for cls in (ours, standard):  # the standard decorator refuses the same calls
            with pytest.raises(TypeError):
                cls(*args, **kwargs)


@pytest.mark.parametrize("case", list(CASES))
def test_hashing_and_assignment_as_the_standard_decorator(case):
    ours, standard = CASES[case]
    if case == "plain":
        for cls in (ours, standard):
            with pytest.raises(TypeError):
                hash(cls(1))
        made = ours(1)
        made.y = 3.0
        assert made.y == 3.0
        return
    made, reference = ours(1, tags=("t",), inner=None), standard(1, tags=("t",), inner=None)
    assert hash(made) == hash(reference) == hash(ours(1, tags=("t",), inner=None, note="not hashed"))
    for cls_made in (made, reference):
        with pytest.raises(FrozenInstanceError):
            cls_made.x = 2
        with pytest.raises(FrozenInstanceError):
            del cls_made.x


def test_a_field_left_out_of_the_hash_is_left_out():
    first = MachineResources(gpus=(), vcpus=2, cpu_ids=(0, 1), ram_available_gib=8.0, sources={"vcpus": "nproc"})
    assert hash(first) == hash(dataclasses.replace(first, sources={})) and first == dataclasses.replace(first, sources={})


def test_omegaconf_reads_and_makes_a_schema():
    @record
    class Outer:
        name: str = MISSING
        rate: float = 0.5
        inner: Inner = field(default_factory=Inner)

    cfg = OmegaConf.structured(Outer)
    assert OmegaConf.to_container(cfg) == {"name": "???", "rate": 0.5, "inner": {"size": 4}}
    cfg.name = "x"
    made = OmegaConf.to_object(cfg)
    assert isinstance(made, Outer) and isinstance(made.inner, Inner) and made == Outer(name="x")
    with pytest.raises(Exception, match="rate"):
        cfg.rate = "fast"
    assert ModelConfig.__doc__ and Outer.__doc__ == "test_omegaconf_reads_and_makes_a_schema.<locals>.Outer(name, rate, inner)"


@pytest.mark.parametrize("decorate", [record, dataclasses.dataclass], ids=["record", "dataclass"])
def test_init_assigns_through_the_class_as_the_dataclass_does(decorate):
    assigned = []

    @decorate
    class Logged:
        a: int = 0
        b: str = "x"

        def __setattr__(self, name, value):  # a class's own __setattr__ sees each field's assignment
            assigned.append(name)
            object.__setattr__(self, name, value)

    class Typed(Logged):  # a subclass's property for a field (Hydra's ConfigNode under fast_composition)
        @property
        def b(self):
            return self.__dict__["_b"].upper()

        @b.setter
        def b(self, value):
            self.__dict__["_b"] = value

    assert vars(Logged(1)) == {"a": 1, "b": "x"} and assigned == ["a", "b"]
    made = Typed(2, "y")
    assert made.b == "Y" and vars(made) == {"a": 2, "_b": "y"} and assigned[2:] == ["a", "b"]
    assert made == Typed(2, "y") and repr(made).endswith("(a=2, b='Y')")


def test_repr_false_keeps_the_repr_the_class_defines_or_inherits_as_the_standard_decorator_does():
    class Base:
        x: int = 0

        def __repr__(self):
            return f"<{type(self).__name__} x={self.x}>"

    for decorate in (record, dataclasses.dataclass):
        base = decorate(Base if decorate is record else type("Base", (), dict(vars(Base))))
        child = decorate(repr=False)(type("Child", (base,), {"__annotations__": {"y": int}, "y": 1}))
        assert repr(child(2, 3)) == "<Child x=2>" and child(2, 3) == child(2, 3)
        assert repr(decorate(type("Shown", (base,), {"__annotations__": {"y": int}, "y": 1}))(2, 3)) == "Shown(x=2, y=3)"
