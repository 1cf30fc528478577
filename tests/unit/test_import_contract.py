"""The data flows one way, and the imports show it: each top-level package of primus_hydra imports only packages
below it (docs/architecture.md, "Layers"), and no two modules import each other, directly or through others.

Every import counts, also those inside functions (a lazy import is still a dependency); imports under
`if TYPE_CHECKING:` do not. A module named in a string counts too: `importlib.import_module("primus_hydra.x")`,
`load_target("primus_hydra.x.Name")`, a table of dotted paths handed to an importer later (any string in code, not a
docstring, that is the dotted path of a module of primus_hydra or of a name in one). A path built at run time from
the config (an f-string, `_target_` in conf/) is the way an upper package is reached, and is not read here.
Read from the source with `ast`: nothing is imported to check it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "primus_hydra"

# bottom to top; a package may import its own modules and any package of a lower layer
LAYERS = [
    {"errors", "util"},
    {"distributed_env"},
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


DOTTED_PATH = re.compile(r"primus_hydra(\.[A-Za-z_]\w*)+")


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The primus_hydra names `module` imports, or names in a string (which may end in a class or function name)."""
    found: set[str] = set()
    docstrings = _docstrings(tree)

    def visit(node: ast.AST) -> None:
        if _is_type_checking_block(node):
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if DOTTED_PATH.fullmatch(node.value):
                found.add(node.value)
        elif isinstance(node, ast.Import):
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
        # `from pkg import name` names a module only when pkg.name is one; a string names its longest module prefix
        targets = {_named_module(name, modules) if name not in modules else name for name in names}
        graph[module] = {target for target in targets if target is not None and target != module}
    return graph


def _named_module(name: str, modules) -> str | None:
    parts = name.split(".")
    while len(parts) > 2 and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) if ".".join(parts) in modules else None


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


NATIVE_BACKEND = "primus_hydra.backends.torch"
SHARED_RAILS = "primus_hydra.backends.common"
# modules outside both that may still name the native backend, and why
NATIVE_BACKEND_READERS: dict[str, str] = {}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_only_the_shared_rails_import_the_native_backend():
    """Another backend or a task reaches backends/torch (the native model, its trainer) through backends/common."""
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if not (_inside(module, NATIVE_BACKEND) or _inside(module, SHARED_RAILS) or module in NATIVE_BACKEND_READERS)
        for target in targets
        if _inside(target, NATIVE_BACKEND)
    )
    assert not offenders, "import backends/torch through backends/common:\n" + "\n".join(offenders)


@pytest.mark.parametrize("source, expected", [
    ("import importlib\nimportlib.import_module('primus_hydra.tasks.train')", {"primus_hydra.tasks.train"}),
    ("load_target('primus_hydra.tasks.train.TrainTask', 'task._target_')", {"primus_hydra.tasks.train.TrainTask"}),
    ("__import__('primus_hydra.launch')", {"primus_hydra.launch"}),
    ("TABLE = {'a': 'primus_hydra.backends.megatron.dcp_weights'}", {"primus_hydra.backends.megatron.dcp_weights"}),
    ('"""primus_hydra.tasks.train, in a docstring"""\nlog = logging.getLogger("primus_hydra.tasks train")', set()),
    ("importlib.import_module(f'primus_hydra.backends.{name}.patches')", set()),
])
def test_a_module_named_in_a_string_is_imported(source, expected):
    assert _imports(ast.parse(source), "primus_hydra.config.x", False) == expected


def test_a_string_names_its_longest_module_prefix():
    modules = {"primus_hydra", "primus_hydra.tasks", "primus_hydra.tasks.train"}
    assert _named_module("primus_hydra.tasks.train.TrainTask", modules) == "primus_hydra.tasks.train"
    assert _named_module("primus_hydra.train", modules) is None  # a logger's name


def test_a_string_import_that_runs_upward_is_found(monkeypatch):
    fake = {"primus_hydra.config.x": 'importlib.import_module("primus_hydra.tasks.train")',
            "primus_hydra.tasks.train": ""}
    monkeypatch.setattr(Path, "read_text", lambda path: fake[_module_name(path)])
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: [SRC / "config" / "x.py", SRC / "tasks" / "train.py"])
    assert import_graph() == {"primus_hydra.config.x": {"primus_hydra.tasks.train"}, "primus_hydra.tasks.train": set()}


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
