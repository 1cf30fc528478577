"""The parse trees config/plain_interpolations.py builds are ANTLR's, token for token, and every other string is left
to ANTLR (whose error the user then sees)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from antlr4 import TerminalNode
from omegaconf import OmegaConf
from omegaconf.grammar_parser import parse as antlr_parse

from helpers.compose import CONF_DIR
from helpers.plain_data import leaves
from primus_hydra.config import fast_omegaconf
from primus_hydra.config.plain_interpolations import plain_parse_tree

# the lexer's pieces, plain and not, that generated strings are made of
PIECES = ["${", "}", ":", ",", ".", "..", "a", "b_c", "x-y", "oc.env", "now", "1", "0", "-2", "+3", "1.5", ".5", "5.",
          "1e3", "2E-1_0", "1_000", "inf", "-Inf", "nan", "null", "NULL", "true", "False", "%", "/", "@", "*", "?", "|",
          "$", "_", "01", "e", "-", " ", "\t", "\\", "'", '"', "[", "]", "{", "(", ")", "=", "#", "é", "k$"]
PLAIN_PIECES = PIECES[5:35]


def _shape(tree):
    """A tree as the visitor reads it: each context's class and children, each token's type and text."""
    if isinstance(tree, TerminalNode):
        return tree.symbol.type, tree.symbol.text
    return type(tree).__name__, tuple(_shape(child) for child in tree.children or ())


def _antlr_shape(text):
    try:
        return _shape(antlr_parse(text))
    except Exception:  # noqa: BLE001 - a string the grammar refuses
        return None


def _interpolation(rng: random.Random, depth: int = 0) -> str:
    if depth > 2 or rng.random() < 0.4:
        keys = (rng.choice(["a", "b1", "x-y", "1", "_", "k$", "é", "a b"]) for _ in range(rng.randint(1, 3)))
        return "${" + rng.choice(["", ".", ".."]) + ".".join(keys) + "}"
    arguments = ("".join(rng.choice(PLAIN_PIECES + [_interpolation(rng, depth + 1)]) for _ in range(rng.randint(1, 3)))
                 for _ in range(rng.randint(0, 3)))
    return "${" + rng.choice(["oc.env", "now", "primus.times", "a.b.c", "1x", ".x"]) + ":" + ",".join(arguments) + "}"


def _generated(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for index in range(count):
        if index % 2:  # any run of pieces
            text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 9)))
            texts.append(text if "${" in text else "${" + text)
        else:  # the shapes configs hold, with a piece of anything now and then
            texts.append(rng.choice(["", "out/", "a_"]) + _interpolation(rng) + rng.choice(["", "/x", _interpolation(rng)]))
    return texts


def test_a_plain_tree_is_antlrs_and_other_strings_are_left_to_antlr():
    built = refused_by_both = 0
    for text in _generated(4000, seed=12):
        tree = plain_parse_tree(text)
        expected = _antlr_shape(text)
        if tree is None:
            refused_by_both += expected is None
            continue
        built += 1
        assert expected is not None, f"{text!r}: built a tree for a string ANTLR refuses"
        assert _shape(tree) == expected, text
    assert built > 1000 and refused_by_both > 1000  # both kinds were met (1181 and 2626 of 4000)


@pytest.mark.parametrize("text", [
    "${a.b}", "${..lr}", "x${a}y${b}z", "${oc.env:ROOT,outputs}/${now:%Y-%m-%d}/${now:%H-%M-%S.%f}_${hydra:a.b}",
    "${primus.times:${.lr},0.1}", "${oc.decode:${oc.env:X,null}}", "${f:}", "$x${a}$", "a$$${b}", "${f:-1,+inf,1e-3,1_000,TRUE,a:b,5.,.5}",
])
def test_the_shapes_configs_hold_get_their_tree(text):
    assert plain_parse_tree(text) is not None
    assert _shape(plain_parse_tree(text)) == _antlr_shape(text)


@pytest.mark.parametrize("text", [
    "plain text", "${ a}", "${a }", "${a:b c}", "${a:'q'}", "${a:[1]}", "${a:{b:1}}", "${a:x,,y}", "${a:,x}", "${a:x,}",
    "\\${a}", "${a\\.b}", "${${a}}", "${a.${b}}", "${.a:b}", "${1x:y}", "${a.}", "${a..b}", "${a", "${a:b",
    "${a:#}", "${a(b)}",
])
def test_strings_that_are_not_plain_are_antlrs(text):
    assert plain_parse_tree(text) is None


def test_every_interpolation_of_conf_and_hydras_config_is_plain():
    import hydra

    texts = set()
    for folder in (Path(CONF_DIR), Path(hydra.__file__).parent / "conf"):
        for path in folder.rglob("*.yaml"):
            texts.update(text for text in leaves(OmegaConf.to_container(OmegaConf.load(path)))
                         if isinstance(text, str) and "${" in text)
    assert len(texts) > 10
    assert [text for text in sorted(texts) if plain_parse_tree(text) is None] == []


def test_values_resolve_as_omegaconf_resolves_them(monkeypatch):
    fast_omegaconf.install()
    monkeypatch.setenv("PLAIN_INTERPOLATIONS_ROOT", "/data")
    source = {"lr": 0.5, "model": {"name": "tiny", "n": 3}, "hidden": {"x": 1},
              "min_lr": "${primus_test.times:${.lr},0.1}", "dir": "${oc.env:PLAIN_INTERPOLATIONS_ROOT,out}/${model.name}_x",
              "missing_env": "${oc.decode:${oc.env:PLAIN_INTERPOLATIONS_UNSET,null}}", "n": "${model.n}",
              "args": "${primus_test.args:-1,+inf,1e-3,1_000,TRUE,a:b,5.,null}", "relative": "${.lr}"}
    OmegaConf.register_new_resolver("primus_test.times", lambda a, b: a * b, replace=True)
    OmegaConf.register_new_resolver("primus_test.args", lambda *args: [repr(arg) for arg in args], replace=True)
    try:
        assert all(plain_parse_tree(text) is not None for text in source.values() if isinstance(text, str))
        assert OmegaConf.to_container(OmegaConf.create(source), resolve=True) == {
            "lr": 0.5, "model": {"name": "tiny", "n": 3}, "hidden": {"x": 1}, "min_lr": 0.05, "dir": "/data/tiny_x",
            "missing_env": None, "n": 3, "args": ["-1", "inf", "0.001", "1000", "True", "'a:b'", "5.0", "None"],
            "relative": 0.5}
    finally:
        OmegaConf.clear_resolver("primus_test.times")
        OmegaConf.clear_resolver("primus_test.args")
