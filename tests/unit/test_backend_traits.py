"""Code outside a backend's folder asks its adapter (BackendAdapter.traits, backends/traits.py), never its name: no
module outside src/primus_hydra/backends/ tests which backend it is, and every adapter's traits are read without
importing torch or the backend's library (composition, projection and validation run without them)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from primus_hydra.backends.base import adapter_class_named
from primus_hydra.config.layout import ParallelLayout, shards_beside_tp
from primus_hydra.config.targets import load_target

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "primus_hydra"
BACKEND_NAMES = sorted(path.stem for path in (REPO / "conf" / "backend").glob("*.yaml"))
ADAPTERS = {name: str(OmegaConf.load(REPO / "conf" / "backend" / f"{name}.yaml")._target_) for name in BACKEND_NAMES}
# where a backend may be named: its own folder and the registry (backends/), and migrate/, which reads Primus's
# configs, whose `framework` names the Primus backend a config was written for
MAY_NAME_BACKENDS = ("backends", "migrate")
# what importing an adapter must not import: torch and the backend libraries
HEAVY = ("torch", "megatron", "torchtitan", "MaxText", "jax", "hummingbirdxt")


def _names(node: ast.AST) -> list[str]:
    """The backend names a constant or a literal collection of constants (a tuple, list, set or dict's keys) holds,
    when it holds nothing else."""
    if isinstance(node, ast.Constant):
        return [node.value] if node.value in BACKEND_NAMES else []
    elements = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or not elements:
        return []
    values = [element.value if isinstance(element, ast.Constant) else None for element in elements]
    return values if all(value in BACKEND_NAMES for value in values) else []


def backend_name_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, names): `x == "torch"`, `x != "torch"`, `x in ("megatron", "megatron_bridge")`, and the tables of backend
    names such tests read (`MEGATRON_LIKE = ("megatron", ...)`, `VOCAB_PAD = {"megatron": 128}`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for left, op, right in zip([node.left, *node.comparators], node.ops, node.comparators):
                sides = [left, right] if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) else \
                    [right] if isinstance(op, (ast.In, ast.NotIn)) else []
                found += [(node.lineno, ", ".join(names)) for names in map(_names, sides) if names]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and not isinstance(node.value, ast.Constant):
            names = _names(node.value)
            found += [(node.lineno, ", ".join(names))] if names else []
    return found


def test_no_module_outside_the_backends_tests_a_backend_name():
    offenders = [f"{path.relative_to(SRC.parent)}:{line} names {names}"
                 for path in sorted(SRC.rglob("*.py"))
                 if path.relative_to(SRC).parts[0] not in MAY_NAME_BACKENDS
                 for line, names in backend_name_tests(ast.parse(path.read_text()))]
    assert not offenders, "ask the adapter's traits (backends/traits.py) instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize("source, expected", [
    ('if cfg.backend.name == "torchtitan": pass', [(1, "torchtitan")]),
    ('ok = "torch" != backend', [(1, "torch")]),
    ('ok = backend in ("megatron", "megatron_bridge")', [(1, "megatron, megatron_bridge")]),
    ('LIKE = ("megatron", "megatron_bridge")', [(1, "megatron, megatron_bridge")]),
    ('PAD = {"megatron": 128}', [(1, "megatron")]),
    ('loaded = "torch" in sys.modules', []),  # a module's name, not a backend's
    ('PRELOAD = ("hydra.core.utils", "torch")', []),
    ('name = "torch"', []),
])
def test_the_walk_finds_backend_name_tests_and_only_those(source, expected):
    assert backend_name_tests(ast.parse(source)) == expected


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_an_adapters_traits_load_without_torch_or_its_library(name):
    script = (f"import json, sys\nfrom primus_hydra.config.targets import load_target\n"
              f"traits = load_target({ADAPTERS[name]!r}).traits\n"
              f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_the_registry_finds_the_adapter_the_backends_option_names(name):
    assert adapter_class_named(name) is load_target(ADAPTERS[name])


@pytest.mark.parametrize("name", ["common", "no_such_backend", "../torch", "", "torch.adapter"])
def test_a_name_no_backend_has_finds_no_adapter(name):
    assert adapter_class_named(name) is None


def test_the_weight_converters_are_megatrons_and_torchtitans():
    converters = {name: load_target(ADAPTERS[name]).traits.weight_converter for name in BACKEND_NAMES}
    assert {name: path for name, path in converters.items() if path} == {
        "megatron": "primus_hydra.backends.megatron.dcp_weights.write_native_copy",
        "torchtitan": "primus_hydra.backends.torchtitan.convert.write_native_copy"}


@pytest.mark.parametrize("tp, dp, fsdp, expected", [
    (1, 4, False, False),  # DDP
    (1, 4, True, True),
    (2, 4, False, True),  # FSDP2 beside TP: a 2-D mesh
    (2, 1, True, False),  # nothing to shard over
])
def test_dp_shards_beside_tp_when_asked_or_next_to_tp(tp, dp, fsdp, expected):
    layout = ParallelLayout(world_size=tp * dp, tp=tp, pp=1, cp=1, ep=1, dp=dp, grad_accum=1, fsdp=fsdp)
    assert shards_beside_tp(layout) is expected


def test_the_native_backend_declares_the_sharding_its_parallelize_applies():
    parallelize = (SRC / "backends" / "torch" / "parallelize.py").read_text()
    assert "return shards_beside_tp(state.layout)" in parallelize
    assert load_target(ADAPTERS["torch"]).traits.dp_shards_beside_tp
