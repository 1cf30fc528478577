"""schema_class makes the same dataclass as @dataclass does, by keyword: fields, defaults, factories, __init__,
__eq__, __repr__, unhashable, dataclasses.replace and OmegaConf's reading of it."""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import List, Optional

import pytest
from omegaconf import MISSING, OmegaConf

from primus_hydra.config.schema_class import schema_class
from primus_hydra.config.schema_model import ModelConfig


@schema_class
class Inner:
    size: int = 4


@schema_class
class Outer:
    name: str = MISSING
    rate: float = 0.5
    tags: List[str] = field(default_factory=lambda: ["a"])
    inner: Inner = field(default_factory=Inner)
    note: Optional[str] = field(default=None, compare=False, repr=False)


@dataclasses.dataclass
class OuterDataclass:  # the same fields by the standard decorator
    name: str = MISSING
    rate: float = 0.5
    tags: List[str] = field(default_factory=lambda: ["a"])
    inner: Inner = field(default_factory=Inner)
    note: Optional[str] = field(default=None, compare=False, repr=False)


def test_it_is_the_dataclass_the_standard_decorator_makes():
    assert [spec.name for spec in dataclasses.fields(Outer)] == [spec.name for spec in dataclasses.fields(OuterDataclass)]
    made, standard = Outer(name="x", rate=2.0), OuterDataclass(name="x", rate=2.0)
    assert dataclasses.asdict(made) == dataclasses.asdict(standard)
    assert repr(made).replace("Outer(", "") == repr(standard).replace("OuterDataclass(", "")
    assert made.tags is not Outer().tags  # a factory per instance
    assert made == Outer(name="x", rate=2.0, note="ignored by ==") and made != Outer(name="y", rate=2.0)
    assert Outer(rate=float("nan")) != Outer(rate=float("nan"))
    assert (made == standard) is False  # another class: not equal, as dataclasses compare
    with pytest.raises(TypeError):
        hash(made)
    assert dataclasses.replace(made, rate=3.0) == Outer(name="x", rate=3.0)
    assert Outer.__doc__ and ModelConfig.__doc__


def test_wrong_arguments_are_refused_as_a_dataclass_refuses_them():
    with pytest.raises(TypeError, match="unexpected keyword arguments: colour"):
        Outer(colour="red")


def test_omegaconf_reads_and_makes_it():
    cfg = OmegaConf.structured(Outer)
    assert OmegaConf.to_container(cfg) == {"name": "???", "rate": 0.5, "tags": ["a"], "inner": {"size": 4},
                                           "note": None}
    cfg.name = "x"
    made = OmegaConf.to_object(cfg)
    assert isinstance(made, Outer) and isinstance(made.inner, Inner) and made == Outer(name="x")
    with pytest.raises(Exception, match="rate"):
        cfg.rate = "fast"
