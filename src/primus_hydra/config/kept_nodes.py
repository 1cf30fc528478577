"""OmegaConf nodes kept as Hydra and OmegaConf made them, for speed only: every command composes them the same way.

1. Hydra's own config, the `hydra` node of a run, a dry run and `compose()`: HydraConf with Hydra's launcher,
   sweeper, logging, help and output configs, and the `hydra:` sections of this project's configs merged in.
   Composing it (~10 configs, a typed schema of ~15 dataclasses, Hydra's plugin scan first) is ~35 ms of a
   command, and it is the same node for every command line whose configs bring the same `hydra:` sections and the
   same entries of Hydra's groups: only Hydra's finishing steps (the overrides, the choices, the runtime fields)
   differ, which config/run_composition.py runs on it. Kept per combination conf/ makes (the default, each
   platform's launcher, each task's logging), keyed by those sections and entries (key_of).
2. The nodes OmegaConf builds from this project's schema dataclasses (`get_structured_config_data`: PrimusConfig,
   ModelConfig, ModuleConfig, LoggerConfig, each backend's and task's), ~30 % of every composition (~15 ms),
   which depend only on the classes (config/fast_omegaconf.py's item 4 hands them out); and the node
   `OmegaConf.structured` makes of each class this project stores in Hydra's ConfigStore (config/stored_nodes.py
   converts a stored class to it when composition first loads it: ~1-2.5 ms a class, five a composition).
3. The node `OmegaConf.load` makes of each file of this project's conf/, keyed by the file's text: building the
   nodes of a composition's ~8 files is ~10 ms on a host where `import hydra` takes 0.4 s, unpickling them ~1.5
   (config/fast_omegaconf.py's item 14 hands them out; a file whose text is not kept is read as before).

src/primus_hydra/config/kept_nodes.pickle holds both, made by scripts/make_kept_nodes.py with Hydra's and
OmegaConf's own code (each `hydra` node checked against Hydra's whole composition, node for node). A section is used
only where it is what they would make now, else they make it as before:

- the same Python, Hydra and OmegaConf versions;
- the same source of every module whose classes the nodes name (and of the modules those import from this
  project), and of conf/hydra/ (a digest of their content, checked once per process).

The file is read with an unpickler that builds only classes of OmegaConf, Hydra, Hydra's plugins and this project's
schemas (and the plain types they hold): it names no function to call, so a changed file cannot run code.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import pickle
import sys
import types
import typing
import zlib
from pathlib import Path
from typing import Any, Callable, Optional

from primus_hydra.config.hydra_dataclasses import HYDRAS_PACKAGES, hydra_dataclasses_made_without_compiling

KEPT_NODES_FILE = Path(__file__).with_name("kept_nodes.pickle")
FORMAT = 1
# the modules whose classes kept nodes are built of (OmegaConf's nodes, Hydra's and its plugins' config classes,
# this project's schemas and the enums they name, the containers and plain types they hold), and the annotations
# their metadata names
ALLOWED_MODULE_PREFIXES = ("omegaconf.", "hydra.", "hydra_plugins.", "primus_hydra.")
ALLOWED_MODULES = frozenset({"builtins", "collections", "pathlib"})
ALLOWED_ANNOTATIONS = frozenset({"Any", "Dict", "List", "Optional", "Union", "Tuple"})
OWN_MODULE_PREFIXES = ("primus_hydra.", "hydra_plugins.primus_")  # this project's modules
_loaded: dict[str, Any] = {}


def key_of(hydra_sections: dict, hydra_entries: list) -> str:
    """The key of a `hydra` node: the `hydra:` sections the configs merged and the entries of Hydra's groups they
    named (job_composition's JobComposition.hydra_sections and .hydra_entries)."""
    text = json.dumps([hydra_sections, hydra_entries], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def kept_hydra_node(key: str, conf_dir: Optional[Path]) -> Optional[tuple[Any, dict]]:
    """The `hydra` node kept for `key` (a new object each call) and what else Hydra's composition made of it (the
    choices of Hydra's groups, Hydra's own config source), or None where none is kept or it may be stale."""
    section = _current_section("hydra", conf_dir)
    if section is None or key not in section["nodes"]:
        return None
    entry = section["nodes"][key]
    return hydra_node_of(section, key), {"hydra_choices": dict(entry["hydra_choices"]),
                                         "hydra_source": tuple(section["hydra_source"])}


def hydra_node_of(section: dict, key: str) -> Any:
    """A kept `hydra` node, new: compressed with the first node kept as zlib's dictionary (the nodes differ little)."""
    unpacker = zlib.decompressobj(zdict=zlib.decompress(section["dictionary"]))
    return _NodeUnpickler.loads(unpacker.decompress(section["nodes"][key]["node"]) + unpacker.flush())


def kept_schema_data(cls: type, allow_objects: Optional[bool]) -> Optional[dict]:
    """OmegaConf's get_structured_config_data(cls, allow_objects) as kept (new objects each call), or None."""
    section = _current_section("schemas", None)
    data = section["classes"].get(schema_key(cls, allow_objects)) if section is not None else None
    return _loads(data) if data is not None else None


def kept_structured_node(cls: type) -> Optional[Any]:
    """OmegaConf.structured(cls) as kept (a new object), or None."""
    section = _current_section("schemas", None)
    data = section["stored"].get(schema_key(cls, None)) if section is not None else None
    return _loads(data) if data is not None else None


def kept_loaded_file(text: str) -> Optional[Any]:
    """What OmegaConf.load makes of a file of this project's conf/ with this text (a new object), or None."""
    section = _current_section("files", None)
    data = section["nodes"].get(text_key(text)) if section is not None else None
    return _loads(data) if data is not None else None


def text_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def loaded_files(conf_dir: Path, load: Callable[[Any], Any]) -> dict[str, bytes]:
    """`load` (OmegaConf's own) of every file of a conf/, pickled, by its text's key."""
    kept = {}
    for path in sorted(conf_dir.rglob("*.yaml")):
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
            stream.seek(0)
            kept[text_key(text)] = dumped(load(stream))
    return kept


def schema_key(cls: type, allow_objects: Optional[bool]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}:{allow_objects}"


def _current_section(name: str, conf_dir: Optional[Path]) -> Optional[dict]:
    """A section of the file whose fingerprint is this installation's (checked once per process and folder)."""
    check = (name, str(conf_dir))
    if check not in _loaded:
        section = (_kept_file() or {}).get(name)
        fresh = section is not None and fingerprint(section["source_modules"], conf_hydra_files(conf_dir)
                                                    if name == "hydra" else {}) == section["fingerprint"]
        _loaded[check] = section if fresh else None
    return _loaded[check]


def _kept_file() -> Optional[dict]:
    if "file" not in _loaded:
        try:
            kept = _NodeUnpickler.loads(KEPT_NODES_FILE.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError):
            kept = None
        _loaded["file"] = kept if isinstance(kept, dict) and kept.get("format") == FORMAT else None
    return _loaded["file"]


def fingerprint(source_modules: list[str], conf_files: dict[str, str]) -> dict:
    """What kept nodes depend on besides their key: the versions of Python, Hydra and OmegaConf, and the digest of
    each module (by name) and conf/ file (by path) whose content they hold."""
    import hydra
    import omegaconf

    digests = {name: _digest(_module_file(name)) for name in source_modules}
    digests.update({name: _digest(Path(path)) for name, path in conf_files.items()})
    return {"python": list(sys.version_info[:2]), "hydra": hydra.__version__, "omegaconf": omegaconf.__version__,
            "digests": digests}


def _module_file(name: str) -> Optional[Path]:
    """The file of a module, found without importing it or its packages (a backend's package may import a lot)."""
    module = sys.modules.get(name)
    if getattr(module, "__file__", None):
        return Path(module.__file__)
    top, _, rest = name.partition(".")
    package = sys.modules.get(top)
    for base in getattr(package, "__path__", None) or ():
        for candidate in (Path(base, *rest.split(".")).with_suffix(".py"), Path(base, *rest.split("."), "__init__.py")):
            if rest and candidate.is_file():
                return candidate
    spec = importlib.util.find_spec(name)
    return Path(spec.origin) if spec is not None and spec.origin else None


def _digest(path: Optional[Path]) -> Optional[str]:
    try:
        return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest() if path is not None else None
    except OSError:
        return None


def conf_hydra_files(conf_dir: Optional[Path]) -> dict[str, str]:
    """This project's configs of Hydra's groups (conf/hydra/**), by their path in conf/."""
    if conf_dir is None or not (conf_dir / "hydra").is_dir():
        return {}
    return {f"conf/{path.relative_to(conf_dir).as_posix()}": str(path)
            for path in sorted((conf_dir / "hydra").rglob("*.yaml"))}


class _NodeUnpickler(pickle.Unpickler):
    """Builds the classes of OmegaConf, Hydra, Hydra's plugins and this project, and plain values; refuses any other
    global, and any function (nothing it loads is called but a class)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "typing" and name in ALLOWED_ANNOTATIONS:
            return super().find_class(module, name)
        if module in ALLOWED_MODULES or module.startswith(ALLOWED_MODULE_PREFIXES):
            imported_here = module not in sys.modules and module.startswith(HYDRAS_PACKAGES)  # a launcher's config
            with hydra_dataclasses_made_without_compiling() if imported_here else contextlib.nullcontext():
                found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"a kept node names {module}.{name}, which is not a class it may hold")

    @classmethod
    def loads(cls, data: bytes) -> Any:
        import io

        return cls(io.BytesIO(data)).load()


def _loads(data: bytes) -> Any:
    return _NodeUnpickler.loads(zlib.decompress(data))


def dumped(value: Any) -> bytes:
    return zlib.compress(pickle.dumps(value, protocol=5), 9)


# --- making the file (scripts/make_kept_nodes.py, tests) -------------------------------------------------------

def made_by_hydra(search_path_dir: str, config_name: str, overrides: list[str]) -> tuple[str, dict, tuple]:
    """The key of the `hydra` node Hydra composes for `overrides`, the node as Hydra's merges leave it (before its
    finishing steps; pickled) with the choices of Hydra's own groups, and Hydra's own config source; composed by
    Hydra's own loader (after Hydra's plugin scan, as a run)."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.defaults_list import create_defaults_list
    from hydra._internal.utils import create_config_search_path

    from primus_hydra.config.job_composition import compose_job

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(search_path_dir))
    parsed, repo = loader._parse_overrides_and_create_caching_repo(config_name, overrides)
    defaults = create_defaults_list(repo=repo, config_name=config_name, overrides_list=parsed, prepend_hydra=True,
                                    skip_missing=False)
    cfg = loader._compose_config_from_defaults_list(defaults=defaults.defaults, repo=repo)
    node = copy.deepcopy(cfg.hydra)
    node._set_parent(None)
    job = compose_job(search_path_dir, config_name, overrides, hydra_values=True)
    if job is None:
        raise ValueError(f"the job's config of {overrides} is composed by Hydra's path only")
    choices = list(defaults.overrides.known_choices.items())
    job_choices = list(job.choices.items())
    if choices[:len(job_choices)] != job_choices:
        raise ValueError(f"the choices of {overrides} are not the job's followed by Hydra's: {choices}")
    first = repo.get_sources()[0]
    entry = {"node": pickle.dumps(node, protocol=5), "hydra_choices": dict(choices[len(job_choices):])}
    return key_of(job.hydra_sections, job.hydra_entries), entry, (first.path, first.scheme(), first.provider)


def recording_schema_builds(build: Callable[..., Any]) -> tuple[Callable[..., Any], dict]:
    """A get_structured_config_data that records each class of this project it builds, and what it built (a copy)."""
    import copy

    recorded: dict[str, bytes] = {}

    def get_structured_config_data(obj: Any, allow_objects: Optional[bool] = None) -> Any:
        data = build(obj, allow_objects=allow_objects)
        if isinstance(obj, type) and obj.__module__.startswith("primus_hydra."):
            recorded.setdefault(schema_key(obj, allow_objects), dumped(copy.deepcopy(data)))
        return data

    return get_structured_config_data, recorded


def source_modules_of(values: list[Any], also: set[str] = frozenset()) -> list[str]:
    """The modules of every class the nodes in `values` name (their schemas, declared types, enums) and of those
    classes' bases, the modules `also`, and the modules of this project that those import from (not Python's
    own)."""
    from omegaconf import DictConfig, EnumNode, ListConfig, Node

    found: set[type] = set()

    def add_type(annotation: Any) -> None:
        if isinstance(annotation, type):
            found.update(annotation.__mro__)
        for argument in typing.get_args(annotation):
            add_type(argument)

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for child in value.values():
                visit(child)
            return
        if not isinstance(value, Node):
            return
        metadata = value._metadata
        for annotation in (metadata.object_type, metadata.ref_type, getattr(metadata, "key_type", None),
                           getattr(metadata, "element_type", None)):
            add_type(annotation)
        if isinstance(value, EnumNode):
            add_type(value.enum_type)
        if isinstance(value, DictConfig) and not value._is_none() and not value._is_missing():
            for key in value.keys():
                visit(value._get_node(key))
        elif isinstance(value, ListConfig) and not value._is_none() and not value._is_missing():
            for index in range(len(value)):
                visit(value._get_node(index))

    for value in values:
        visit(value)
    modules = {cls.__module__ for cls in found} | set(also)
    modules = {name for name in modules if name.partition(".")[0] not in sys.stdlib_module_names}
    for name in list(modules):
        if name.startswith(OWN_MODULE_PREFIXES) and name in sys.modules:
            modules |= _own_imports(sys.modules[name])
    return sorted(modules)


def _own_imports(module: types.ModuleType) -> set[str]:
    """The modules of this project that `module` imports from: a module it names, or a class or function of one."""
    names = set()
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and name.startswith(OWN_MODULE_PREFIXES) and name != module.__name__:
            names.add(name)
    return names


def group_options(conf_dir: Path) -> list[str]:
    """`group=option` for every option of every config group of a conf/ (its folders but Hydra's own)."""
    return [f"{group.name}={path.relative_to(group).with_suffix('').as_posix()}"
            for group in sorted(conf_dir.iterdir()) if group.is_dir() and group.name not in ("hydra", "__pycache__")
            for path in sorted(group.rglob("*.yaml"))]


def write_kept_file(hydra_nodes: dict[str, dict], hydra_source: tuple, schema_classes: dict[str, bytes],
                    stored_classes: list[type], conf_dir: Path, file_nodes: dict[str, bytes], file_modules: list[str],
                    path: Path = KEPT_NODES_FILE) -> None:
    """The file of kept nodes, each section with the fingerprint of what it was made from (the loaded files': the
    modules that read YAML, `file_modules`); `stored_classes`' nodes made by OmegaConf.structured."""
    from omegaconf import OmegaConf

    dictionary = next(iter(hydra_nodes.values()))["node"] if hydra_nodes else b""
    packed = {}
    for key, entry in hydra_nodes.items():
        packer = zlib.compressobj(9, zdict=dictionary)
        packed[key] = {**entry, "node": packer.compress(entry["node"]) + packer.flush()}
    hydra_modules = source_modules_of([_NodeUnpickler.loads(entry["node"]) for entry in hydra_nodes.values()])
    stored = {schema_key(cls, None): dumped(OmegaConf.structured(cls)) for cls in stored_classes}
    schema_modules = source_modules_of([_loads(data) for data in [*schema_classes.values(), *stored.values()]],
                                       {key.partition(":")[0] for key in [*schema_classes, *stored]})
    path.write_bytes(pickle.dumps({
        "format": FORMAT,
        "hydra": {"fingerprint": fingerprint(hydra_modules, conf_hydra_files(conf_dir)),
                  "source_modules": hydra_modules, "hydra_source": list(hydra_source),
                  "dictionary": zlib.compress(dictionary, 9), "nodes": packed},
        "schemas": {"fingerprint": fingerprint(schema_modules, {}), "source_modules": schema_modules,
                    "classes": schema_classes, "stored": stored},
        "files": {"fingerprint": fingerprint(file_modules, {}), "source_modules": file_modules, "nodes": file_nodes},
    }, protocol=5))
    _loaded.clear()
