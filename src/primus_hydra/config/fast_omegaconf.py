"""Changes to how OmegaConf 2.3 reads, writes, builds and copies configs, for speed only: every config is the same.

1. YAML is parsed by libyaml's C parser (`yaml.CSafeLoader`) under OmegaConf's own rules: its resolvers (the wider
   float rule, no timestamps), its constructors and its refusal of a key written twice. OmegaConf parses with the
   pure-Python loader and builds a new loader class for every file; composing this project's config reads ~60
   files, which took ~45 ms of ~130 (scripts/bench/bench_cfg_print.py). A file libyaml refuses is read again by
   OmegaConf's loader, so that its error is worded as before. Where libyaml is missing nothing changes. The tag of a
   plain scalar is looked up once per text (util/yaml_tags.py), here and in item 3's writer.

2. OmegaConf parses an interpolation (`${...}`) with its ANTLR grammar (~1 ms a string in pure Python) each time
   it meets it: when a node is made, merged into or resolved. Composing this project's config parses the same ~10
   strings 17-35 times. The parse tree of a string is kept (it is read, never changed, by OmegaConf's visitor).
   A plain string's tree (text around `${key.path}` and `${resolver:plain,args}`: every one in conf/ and Hydra's
   config) is built directly (config/plain_interpolations.py), the same tree without ANTLR's first parses (~5 ms
   for the first string of a process, ~2 ms for each new shape, ~12 ms of a dry run).

3. OmegaConf writes YAML (`OmegaConf.to_yaml`, `OmegaConf.save`: `--cfg`, Hydra's .hydra/*.yaml of a run) with
   PyYAML's pure-Python emitter, ~25 ms for this project's config; libyaml's emitter writes the same text, with
   OmegaConf's own representer (strings that would read back as another type are quoted).

4. Merging a group's config into its typed section (`model: ModelConfig = MISSING`) builds the section from its
   dataclass first (OmegaConf's `expand`: ~11 ms for ModelConfig, ~9 for ModuleConfig, every composition), as does
   storing a schema. The nodes a dataclass makes depend only on the class (its defaults and default factories are
   constants): a class of this project's is the nodes kept for it in config/kept_nodes.pickle where those were made
   from this installation's sources (config/kept_nodes.py), else built, and a copy of its second build when it is
   built a second time in one process (~3x faster).

5. Every deep copy of a config (Hydra copies each loaded config and each node it sets; task=import copies a composed
   config per experiment) copies each node's metadata through `copy`'s generic reduce-and-rebuild path, half of the
   copy's time. Metadata whose fields are types, flags and plain keys, with no resolver results cached, is copied
   field by field instead (a new flags dict, a new empty cache, the same immutable values); any other goes the
   generic way.

6. OmegaConf asks of nearly every value whether it is `???`, an interpolation or None (`_is_missing_value`,
   `_is_interpolation`, `_is_none`: ~6,000 calls a composition, ~1.3 million in task=import over Primus's examples),
   and reads a node's value through `_get_value` (~380,000 there); each call imports the node classes again (`from
   omegaconf import Node`, ~a third of the call). The same four functions, with the classes looked up once, stand in
   for them in every OmegaConf module that holds them.

7. Every value node OmegaConf makes (~60 a config file's values, ~1,000 a composition) sets its value inside
   `read_write(node)`: a generator context manager and two flag changes through OmegaConf.set_readonly. The node's
   own `readonly` flag is set and restored directly instead, with the same flags and caches afterwards; and a plain
   value (str, int, float, bool, None) under an untyped key becomes an AnyNode without _node_wrap's ten type tests,
   which end there for it. Values are validated as before (an invalid interpolation raises as before).

8. A deep copy of a config (item 5) first makes each copied node with its class's constructor, with its own
   value and metadata (a DictConfig of None, an AnyNode of None: validated, flags set and reset), then overwrites all
   of them. The copies of dict and list nodes and of the value nodes that hold nothing else (AnyNode, StringNode,
   IntegerNode, FloatNode, BooleanNode, BytesNode, PathNode) are made empty and filled with the same fields
   instead (~half a composed config's copy time); EnumNode and any other node are copied as before.

9. Merging a value over an interpolation resolves the interpolation first (`_map_merge`: a `${...}` that points at a
   dict or list is merged into rather than replaced), which parses it. Hydra's own config merges its schema over
   `hydra.run.dir`, `hydra.sweep.dir` and the help templates, ~7 ms of a composition's grammar parses. A string with
   text before its first or after its last interpolation (`outputs/${now:%Y-%m-%d}`) resolves to a string, never
   to a dict or list, so the merge's question is answered without resolving it; a string that is one `${...}` is
   resolved as before.

10. Reading a key of a dict node (`DictConfig._get_node`: ~900 a validation, ~250,000 in task=import over Primus's
   examples) first asks whether the node is typed and in struct mode, which matters only for a key it does not hold
   (then it raises). A text key the node holds, under a node whose keys are Any or str, is its child at once; any
   other read (another key type, a key it lacks, a read that raises on `???`) is OmegaConf's own.

11. A config made plain (`OmegaConf.to_container`: ~20 times a run's start, for Hydra's .hydra/ files, the job's
   files, its digest, the secrets it holds, every `to_yaml`) is read key by key through `_get_child` and
   `_dereference_node`, ~10 calls a value. A value node holding a plain value (not `???`, not text with `${`) and a
   dict or list node holding its children are read directly instead; any other child (an interpolation, `???`, a
   union, a container that is None, missing or an interpolation) is read as OmegaConf reads it, errors included.

14. `OmegaConf.load` builds a node for every value of a file (~1.5 ms a file of this project's conf/, ~8 files a
   composition). A file of this project's conf/ read from a stream (as Hydra's config sources read it) is the node
   kept for its text in config/kept_nodes.pickle (section 3, made by OmegaConf's own load); any other text, a path
   and a stream that cannot seek back are loaded as before.

12-13. OmegaConf's node classes checked by their MRO, and its tree walks without a per-call import:
   config/fast_node_classes.py.

`install()` is idempotent; config/fast_composition.py's install() calls it.
"""
from __future__ import annotations

from typing import Any, Optional

import yaml
from omegaconf._utils import get_omega_conf_dumper as omegaconfs_get_omega_conf_dumper  # kept: install() replaces it
from omegaconf._utils import get_yaml_loader as omegaconfs_get_yaml_loader  # kept: install() replaces it

from primus_hydra.config import fast_node_classes
from primus_hydra.util.yaml_tags import ScalarTagsResolvedOnce

_INSTALLED = False


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    _install_c_yaml_loader()
    _keep_interpolation_parse_trees()
    _install_c_yaml_dumper()
    _keep_schema_sections_built_twice()
    _copy_node_metadata_field_by_field()
    _check_values_without_imports()
    _make_value_nodes_directly()
    _copy_nodes_without_constructing_them()
    _merge_over_text_interpolations_without_resolving_them()
    _read_held_keys_without_struct_checks()
    _read_plain_values_directly_when_made_plain()
    fast_node_classes.install()
    _load_kept_files()


def _load_kept_files() -> None:
    from omegaconf import OmegaConf

    from primus_hydra.config.kept_nodes import kept_loaded_file

    load = OmegaConf.load

    def load_kept(file_: Any) -> Any:
        if hasattr(file_, "read") and hasattr(file_, "seek"):
            try:
                start = file_.tell()
                text = file_.read()
            except (OSError, ValueError):  # not seekable, or not readable: read as before
                return load(file_)
            node = kept_loaded_file(text) if isinstance(text, str) else None
            if node is not None:
                return node
            file_.seek(start)
        return load(file_)

    load_kept.__wrapped__ = load
    OmegaConf.load = staticmethod(load_kept)


def _install_c_yaml_loader() -> None:
    if not hasattr(yaml, "CSafeLoader"):
        return
    import omegaconf._utils as omegaconf_utils
    import omegaconf.basecontainer as basecontainer

    python_loader = python_yaml_loader()

    class OmegaConfCLoader(ScalarTagsResolvedOnce, yaml.CSafeLoader):
        def __init__(self, stream: Any) -> None:
            self._stream = stream
            super().__init__(stream)

        def get_single_data(self) -> Any:
            try:
                return super().get_single_data()
            except yaml.YAMLError:  # libyaml words its errors its own way: read the file again as OmegaConf
                if hasattr(self._stream, "read") and not self._stream.seekable():  # would, for its message
                    raise
                if hasattr(self._stream, "seek"):
                    self._stream.seek(0)
                loader = python_loader(self._stream)
                try:
                    return loader.get_single_data()
                finally:
                    loader.dispose()

    # OmegaConf's construct_mapping calls super() of its Python class: the C class gets the same check
    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        keys = set()
        for key_node, _ in node.value:
            if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                continue
            if key_node.value in keys:
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"found duplicate key {key_node.value}", key_node.start_mark)
            keys.add(key_node.value)
        return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)

    OmegaConfCLoader.construct_mapping = construct_mapping
    OmegaConfCLoader.yaml_implicit_resolvers = python_loader.yaml_implicit_resolvers
    OmegaConfCLoader.yaml_constructors = python_loader.yaml_constructors

    def get_yaml_loader() -> Any:
        return OmegaConfCLoader

    omegaconf_utils.get_yaml_loader = get_yaml_loader
    basecontainer.get_yaml_loader = get_yaml_loader


def _keep_schema_sections_built_twice() -> None:
    import copy

    import omegaconf._utils as omegaconf_utils
    import omegaconf.basecontainer as basecontainer
    import omegaconf.dictconfig as dictconfig

    from primus_hydra.config.kept_nodes import kept_schema_data

    build = omegaconf_utils.get_structured_config_data
    seen: set[tuple] = set()
    kept: dict[tuple, dict] = {}  # (class, allow_objects) -> its nodes, never handed out

    def get_structured_config_data(obj: Any, allow_objects: Optional[bool] = None) -> Any:
        if not isinstance(obj, type) or not obj.__module__.startswith("primus_hydra."):
            return build(obj, allow_objects=allow_objects)
        key = (obj, allow_objects)
        if key not in kept:
            # as this installation's OmegaConf builds it (kept_nodes.py), else built
            made = kept_schema_data(obj, allow_objects) or build(obj, allow_objects=allow_objects)
            if key not in seen:  # once per process (a command line's composition): no copy kept
                seen.add(key)
                return made
            kept[key] = made
        return {name: copy.deepcopy(node) for name, node in kept[key].items()}

    for module in (omegaconf_utils, basecontainer, dictconfig):
        module.get_structured_config_data = get_structured_config_data


def _copy_node_metadata_field_by_field() -> None:
    import collections
    import copy
    import dataclasses
    import enum

    from omegaconf.base import ContainerMetadata, Metadata

    plain_keys = (str, int, float, bool, bytes, type(None), enum.Enum)
    fields = {cls: frozenset(field.name for field in dataclasses.fields(cls)) for cls in (Metadata, ContainerMetadata)}

    def deepcopy_metadata(self: Metadata, memo: dict) -> Metadata:
        state = self.__dict__
        if type(self) not in fields or state.keys() != fields[type(self)] or self.resolver_cache \
                or not isinstance(self.key, plain_keys) \
                or (self.flags and any(value is not None and type(value) is not bool for value in self.flags.values())):
            copied = copy._reconstruct(self, memo, *self.__reduce_ex__(4))  # what copy.deepcopy does without this
        else:
            copied = object.__new__(type(self))
            copied.__dict__.update(state)
            copied.__dict__["flags"] = dict(self.flags) if self.flags is not None else None
            copied.__dict__["resolver_cache"] = collections.defaultdict(dict)
        memo[id(self)] = copied
        return copied

    Metadata.__deepcopy__ = deepcopy_metadata  # ContainerMetadata inherits it


def _install_c_yaml_dumper() -> None:
    if not hasattr(yaml, "CDumper"):
        return
    import omegaconf._utils as omegaconf_utils
    import omegaconf.omegaconf as omegaconf_module

    python_dumper = python_omegaconf_dumper()

    class OmegaConfCDumper(ScalarTagsResolvedOnce, yaml.CDumper):  # OmegaConf's (PyYAML's full Dumper), in C
        pass

    OmegaConfCDumper.yaml_representers = dict(python_dumper.yaml_representers)
    OmegaConfCDumper.yaml_multi_representers = dict(python_dumper.yaml_multi_representers)

    def get_omega_conf_dumper() -> Any:
        return OmegaConfCDumper

    omegaconf_utils.get_omega_conf_dumper = get_omega_conf_dumper
    omegaconf_module.get_omega_conf_dumper = get_omega_conf_dumper


def python_omegaconf_dumper() -> Any:
    """OmegaConf's own (pure-Python) dumper class, as it builds it."""
    return omegaconfs_get_omega_conf_dumper()


PARSE_TREES_KEPT = 1024


def _keep_interpolation_parse_trees() -> None:
    import omegaconf._utils
    import omegaconf.base
    import omegaconf.grammar_parser
    import omegaconf.resolvers.oc

    from primus_hydra.config.plain_interpolations import plain_parse_tree

    parse = omegaconf.grammar_parser.parse
    trees: dict[tuple, Any] = {}

    def parse_once(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE") -> Any:
        key = (value, parser_rule, lexer_mode)
        tree = trees.get(key)
        if tree is None:
            if parser_rule == "configValue" and lexer_mode == "DEFAULT_MODE":
                tree = plain_parse_tree(value)
            if tree is None:
                tree = parse(value, parser_rule, lexer_mode)  # a string the grammar refuses raises, every time
            if len(trees) >= PARSE_TREES_KEPT:
                trees.clear()
            trees[key] = tree
        return tree

    for module in (omegaconf.grammar_parser, omegaconf._utils, omegaconf.base, omegaconf.resolvers.oc):
        module.parse = parse_once


def python_yaml_loader() -> Any:
    """OmegaConf's own (pure-Python) loader class, as it builds it."""
    return omegaconfs_get_yaml_loader()


def _check_values_without_imports() -> None:
    import sys

    import omegaconf._utils as omegaconf_utils
    from omegaconf import Container, Node, UnionNode
    from omegaconf.nodes import ValueNode

    def _is_missing_value(value: Any) -> bool:
        if isinstance(value, Node):
            value = value._value()
        return isinstance(value, str) and value == "???"  # OmegaConf's _is_missing_literal

    def _is_interpolation(v: Any, strict_interpolation_validation: bool = False) -> bool:
        if isinstance(v, Node):
            v = v._value()
        if isinstance(v, str) and omegaconf_utils._is_interpolation_string(v, strict_interpolation_validation):
            return True
        return False

    def _is_none(value: Any, resolve: bool = False, throw_on_resolution_failure: bool = True) -> bool:
        if not isinstance(value, Node):
            return value is None
        if resolve:
            value = value._maybe_dereference_node(throw_on_resolution_failure=throw_on_resolution_failure)
            if not throw_on_resolution_failure and value is None:  # a failed resolution is not None
                return False
            assert isinstance(value, Node)
        return value._is_none()

    def _get_value(value: Any) -> Any:
        if isinstance(value, ValueNode):
            return value._value()
        if isinstance(value, (Container, UnionNode)):
            boxed = value._value()
            if boxed is None or omegaconf_utils._is_missing_literal(boxed) or _is_interpolation(boxed):
                return boxed
            if isinstance(value, UnionNode):
                return _get_value(boxed)  # the value of the node it boxes
        return value  # a plain value, or a container holding a dict or list

    replacements = {name: (getattr(omegaconf_utils, name), check) for name, check in
                    (("_is_missing_value", _is_missing_value), ("_is_interpolation", _is_interpolation),
                     ("_is_none", _is_none), ("_get_value", _get_value))}
    for name, module in list(sys.modules.items()):
        if name == "omegaconf" or name.startswith("omegaconf."):
            for function, (original, check) in replacements.items():
                if getattr(module, function, None) is original:
                    setattr(module, function, check)


SHIPPED: dict[str, Any] = {}  # OmegaConf's own functions that install() replaced (items 7-8), as shipped


def _make_value_nodes_directly() -> None:
    import omegaconf.omegaconf as omegaconf_module
    from omegaconf import AnyNode
    from omegaconf.nodes import ValueNode

    SHIPPED.update(value_node_init=ValueNode.__init__, node_wrap=omegaconf_module._node_wrap)

    def value_node_init(self: ValueNode, parent: Any, value: Any, metadata: Any) -> None:
        state = self.__dict__  # Node.__init__'s three fields
        state["_metadata"], state["_parent"], state["_flags_cache"] = metadata, parent, None
        flags = metadata.flags
        own = flags.get("readonly")
        flags["readonly"] = False  # read_write(self): set_readonly(False) ... set_readonly(own)
        try:
            self._set_value(value)
        finally:
            if own is None:
                del flags["readonly"]
            else:
                flags["readonly"] = own
            state["_flags_cache"] = None

    node_wrap = SHIPPED["node_wrap"]
    untyped, plain_types = omegaconf_module.Any, (str, int, float, bool, type(None))

    def _node_wrap(parent: Any, is_optional: bool, value: Any, key: Any, ref_type: Any = untyped) -> Any:
        if ref_type is untyped and type(value) in plain_types:  # where _node_wrap's tests end for it
            return AnyNode(value=value, key=key, parent=parent)
        return node_wrap(parent, is_optional, value, key, ref_type)

    ValueNode.__init__ = value_node_init
    omegaconf_module._node_wrap = _node_wrap


def _copy_nodes_without_constructing_them() -> None:
    import copy

    from omegaconf import (
        AnyNode,
        BooleanNode,
        BytesNode,
        DictConfig,
        FloatNode,
        IntegerNode,
        ListConfig,
        PathNode,
        StringNode,
    )

    def copy_value_node(self: Any, memo: dict) -> Any:
        copied = object.__new__(type(self))
        copied.__dict__["_flags_cache"] = None  # as its constructor leaves it; _deepcopy_impl sets the rest
        self._deepcopy_impl(copied, memo)
        return copied

    def copy_container(self: Any, memo: dict) -> Any:
        copied = object.__new__(type(self))
        state, own = copied.__dict__, self.__dict__
        state["_metadata"] = copy.deepcopy(own["_metadata"], memo=memo)
        state["_flags_cache"] = copy.deepcopy(own["_flags_cache"], memo=memo)
        content = own["_content"]
        if isinstance(content, (dict, list)):  # else None, `???` or an interpolation: held as it is
            children = content.items() if isinstance(content, dict) else enumerate(content)
            copies = [(key, _copied_child(child, copied, memo)) for key, child in children]
            content = dict(copies) if isinstance(content, dict) else [child for _, child in copies]
        state["_content"] = content
        state["_parent"] = own["_parent"]  # kept, not copied
        return copied

    def _copied_child(child: Any, parent: Any, memo: dict) -> Any:
        own_parent = child.__dict__["_parent"]
        child.__dict__["_parent"] = None  # the child's copy never reaches the tree above it
        try:
            copied = copy.deepcopy(child, memo=memo)
            copied.__dict__["_parent"] = parent
        finally:  # last, as OmegaConf does: a node the memo shares (values.without_hydra_node) stays in place
            child.__dict__["_parent"] = own_parent
        return copied

    for node_class in (AnyNode, StringNode, IntegerNode, FloatNode, BooleanNode, BytesNode, PathNode):
        SHIPPED[f"{node_class.__name__}.__deepcopy__"] = node_class.__deepcopy__
        node_class.__deepcopy__ = copy_value_node
    for container_class in (DictConfig, ListConfig):
        SHIPPED[f"{container_class.__name__}.__deepcopy__"] = container_class.__deepcopy__
        container_class.__deepcopy__ = copy_container


def _merge_over_text_interpolations_without_resolving_them() -> None:
    import sys

    from omegaconf import Node
    from omegaconf.basecontainer import BaseContainer

    dereference = Node._maybe_dereference_node
    merge_code = BaseContainer._map_merge.__code__

    def _maybe_dereference_node(self: Node, throw_on_resolution_failure: bool = False,
                                memo: Optional[set] = None) -> Optional[Node]:
        if sys._getframe(1).f_code is merge_code:  # the merge reads only whether it is a container
            value = self._value()
            if isinstance(value, str) and not (value.startswith("${") and value.endswith("}")):
                return None  # text and interpolations: a string (OmegaConf's visitText)
        return dereference(self, throw_on_resolution_failure, memo)

    _maybe_dereference_node.__wrapped__ = dereference
    Node._maybe_dereference_node = _maybe_dereference_node


def _read_held_keys_without_struct_checks() -> None:
    from omegaconf import DictConfig

    get_node = DictConfig._get_node

    def _get_node(self: DictConfig, key: Any, validate_access: bool = True, validate_key: bool = True,
                  throw_on_missing_value: bool = False, throw_on_missing_key: bool = False) -> Any:
        if type(key) is str and not throw_on_missing_value:
            content = self.__dict__["_content"]
            if type(content) is dict:
                child = content.get(key)
                if child is not None:
                    key_type = self.__dict__["_metadata"].key_type
                    if key_type is Any or key_type is str:  # the key as OmegaConf normalizes it: itself
                        return child
        return get_node(self, key, validate_access, validate_key, throw_on_missing_value, throw_on_missing_key)

    _get_node.__wrapped__ = get_node
    DictConfig._get_node = _get_node


def _read_plain_values_directly_when_made_plain() -> None:
    import enum

    from omegaconf import (
        AnyNode,
        BooleanNode,
        BytesNode,
        DictConfig,
        EnumNode,
        FloatNode,
        IntegerNode,
        ListConfig,
        PathNode,
        SCMode,
        StringNode,
    )
    from omegaconf.basecontainer import BaseContainer
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    to_content = BaseContainer._to_content
    plain_value_nodes = (AnyNode, StringNode, IntegerNode, FloatNode, BooleanNode, BytesNode, PathNode, EnumNode)
    read_its_own_way = object()

    def held_value(child: Any, resolve: bool, throw_on_missing: bool, enum_to_str: bool) -> Any:
        """A child's plain value, read directly where nothing in it needs OmegaConf's reading."""
        child_type = type(child)
        if child_type in plain_value_nodes:
            value = child.__dict__["_val"]
            if isinstance(value, str) and (value == "???" or "${" in value):
                return read_its_own_way
            return value.name if enum_to_str and isinstance(value, enum.Enum) else value
        if (child_type is DictConfig or child_type is ListConfig) \
                and isinstance(child.__dict__["_content"], (dict, list)):
            return _to_content(child, resolve, throw_on_missing, enum_to_str)
        return read_its_own_way

    def read_as_omegaconf(conf: Any, key: Any, resolve: bool, throw_on_missing: bool, enum_to_str: bool) -> Any:
        """OmegaConf's own reading of one child (BaseContainer._to_content's), its errors worded as there."""
        try:
            node = conf._get_child(key, throw_on_missing_value=throw_on_missing)
        except MissingMandatoryValue as error:
            conf._format_and_raise(key=key, value=None, cause=error)
        if resolve:
            try:
                node = node._dereference_node()
            except InterpolationResolutionError as error:
                conf._format_and_raise(key=key, value=None, cause=error)
        if isinstance(node, (DictConfig, ListConfig)):
            return _to_content(node, resolve, throw_on_missing, enum_to_str)
        value = node._value()
        return value.name if enum_to_str and isinstance(value, enum.Enum) else value

    def _to_content(conf: Any, resolve: bool, throw_on_missing: bool, enum_to_str: bool = False,
                    structured_config_mode: Any = SCMode.DICT) -> Any:
        content = conf.__dict__.get("_content")
        if structured_config_mode is not SCMode.DICT or not (
                (type(conf) is DictConfig and type(content) is dict) or (type(conf) is ListConfig
                                                                      and type(content) is list)):
            return to_content(conf, resolve, throw_on_missing, enum_to_str, structured_config_mode)
        if type(content) is list:
            values = []
            for index, child in enumerate(content):
                value = held_value(child, resolve, throw_on_missing, enum_to_str)
                values.append(value if value is not read_its_own_way
                              else read_as_omegaconf(conf, index, resolve, throw_on_missing, enum_to_str))
            return values
        result = {}
        for key, child in content.items():
            value = held_value(child, resolve, throw_on_missing, enum_to_str)
            if value is read_its_own_way:
                value = read_as_omegaconf(conf, key, resolve, throw_on_missing, enum_to_str)
            result[key.name if enum_to_str and isinstance(key, enum.Enum) else key] = value
        return result

    _to_content.__wrapped__ = to_content
    BaseContainer._to_content = staticmethod(_to_content)
