"""The data flows one way, and the imports show it: each top-level package of primus_hydra imports only packages
below it (docs/architecture.md, "Layers"), and no two modules import each other, directly or through others.

Every import counts, also those inside functions (a lazy import is still a dependency); imports under
`if TYPE_CHECKING:` do not. Read from the source with `ast`: nothing is imported to check it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "primus_hydra"

# bottom to top; a package may import its own modules and any package of a lower layer
LAYERS = [
    {"errors", "distributed_env", "util"},
    {"config"},
    {"patches"},
    {"backends"},
    {"projection"},
    {"orchestrator", "migrate"},
    {"benchmark"},
    {"runtime"},
    {"launch"},
    {"tasks"},
    {"cli", "api"},
    {"__main__", "__init__"},
]
LAYER_OF = {name: index for index, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _is_type_checking_block(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name == "primus_hydra" or name.startswith("primus_hydra.")}


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in SRC.rglob("*.py")}
    graph = {}
    for module, path in modules.items():
        names = _imports(ast.parse(path.read_text()), module, path.name == "__init__.py")
        # `from pkg import name` names a module only when pkg.name is one
        graph[module] = {name for name in names if name in modules and name != module}
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_package_has_a_layer():
    tops = {_top(module) for module in import_graph()}
    assert tops <= set(LAYER_OF), f"add these to LAYERS: {sorted(tops - set(LAYER_OF))}"


def test_packages_import_only_the_layers_below_them():
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if _top(target) != _top(module) and LAYER_OF[_top(target)] >= LAYER_OF[_top(module)]
    )
    assert not upward, "imports that look up (or sideways):\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def test_no_two_modules_import_each_other():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert _cycles(graph) == expected


WORKER_SIDE = ["primus_hydra/runtime", "primus_hydra/launch/worker.py", "primus_hydra/launch/sweep/point.py",
               "primus_hydra/launch/slurm/entry.py", "primus_hydra/backends"]
PREPARING = {"validate_config", "prepare", "layout_failures", "parallel_layout", "build_resource_plan"}


def test_the_worker_side_trusts_the_prepared_job():
    """Workers load what the orchestrator prepared (launch/job_config.py) and never validate or lay it out again.
    (A Slurm node plans its own share through plan_on_this_node; it does not check the job again.)"""
    offenders = []
    for entry in WORKER_SIDE:
        path = SRC.parent / entry
        for file in ([path] if path.suffix == ".py" else sorted(path.rglob("*.py"))):
            for node in ast.walk(ast.parse(file.read_text())):
                name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
                if name is None and isinstance(node, ast.alias):
                    name = node.name.rsplit(".", 1)[-1]
                if name in PREPARING:
                    offenders.append(f"{file.relative_to(SRC.parent)}:{getattr(node, 'lineno', '?')} uses {name}")
    assert not offenders, "\n".join(offenders)
