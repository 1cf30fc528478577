"""Hydra imported by the command line and the Python API (config/hydra_import.py): its own and its plugins'
dataclasses made as records behave as the standard decorator's, Hydra's own config is converted when first loaded,
and what the command line prints is the same bytes as with Hydra imported the standard way."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from primus_hydra.config import hydra_dataclasses

CLASSES_SCRIPT = """
import dataclasses, importlib.util, json, sys
from primus_hydra.config.hydra_dataclasses import STANDARD_DATACLASS
from primus_hydra.config.hydra_import import fast_hydra_import
with fast_hydra_import():
    import hydra
    from primus_hydra.config import fast_composition
fast_composition.install()
from hydra.core.plugins import Plugins
from omegaconf import OmegaConf
Plugins.instance()  # the plugin scan: hydra_plugins' classes
assert dataclasses.dataclass is STANDARD_DATACLASS  # given back after each
assert not any(type(finder).__name__ == "_ImportHook" for finder in sys.meta_path)

def outcome(make):
    try:
        return make()
    except Exception as error:  # the same error, worded the same
        return f"{type(error).__name__}: {error}".replace("standard.", "")

def described(cls):
    fields = [(f.name, str(f.type), repr(f.default), outcome(lambda: repr(f.default_factory())) if callable(
        f.default_factory) else None, f.init, f.repr, f.compare) for f in dataclasses.fields(cls)]
    required = {f.name: f"<{f.name}>" for f in dataclasses.fields(cls) if f.init and f.default is
                dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    def made():
        instance = cls(**required)
        first = dataclasses.fields(cls)[0].name if dataclasses.fields(cls) else "x"
        return [repr(instance).replace(type(instance).__qualname__, ""), instance == cls(**required),
                outcome(lambda: hash(instance)), outcome(lambda: setattr(instance, first, None))]  # frozen refuses
    return [fields, outcome(lambda: OmegaConf.to_yaml(OmegaConf.structured(cls))), outcome(made),
            cls.__hash__ is None, sorted(required), cls.__match_args__]

report = {}
for name, module in sorted(sys.modules.items()):
    if not name.startswith(("hydra.", "hydra_plugins.")) or not getattr(module, "__file__", None):
        continue
    classes = {attribute: made for attribute, made in vars(module).items()
               if isinstance(made, type) and dataclasses.is_dataclass(made) and made.__module__ == name}
    if not classes:
        continue
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    standard = importlib.util.module_from_spec(spec)  # the same source, made with the standard decorator
    spec.loader.exec_module(standard)
    for attribute, made in classes.items():
        report[f"{name}.{attribute}"] = ["__record__" in vars(made), described(made) == described(
            getattr(standard, attribute))]
print(json.dumps(report))
"""


def test_hydras_and_its_plugins_dataclasses_are_made_as_the_standard_decorator_makes_them():
    done = subprocess.run([sys.executable, "-c", CLASSES_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report == {name: [report[name][0], True] for name in report}  # each as the standard one
    records = {name for name, (record, _) in report.items() if record}
    assert {"hydra.conf.HydraConf", "hydra.conf.JobConf", "hydra.core.override_parser.types.Override",
            "hydra.core.default_element.InputDefault", "hydra.core.config_store.ConfigNode",
            "hydra_plugins.hydra_optuna_sweeper.config.TPESamplerConfig"} <= records
    assert len(records) >= 48 and {"hydra.core.override_parser.types.QuotedString",  # frozen=True
                                   "hydra.core.default_element.ConfigDefault"} <= records  # repr=False


@pytest.mark.parametrize("declared", ["x: dataclasses.InitVar[int] = 0", "_: dataclasses.KW_ONLY\n    x: int = 0",
                                      "x: int = dataclasses.field(default=0, kw_only=True)"])
def test_a_hydra_class_asking_for_more_than_a_record_gets_the_standard_decorator(declared):
    namespace = {"dataclasses": dataclasses, "__name__": "hydra_plugins.example"}
    source = f"class Settings:\n    {declared}\nclass Plain:\n    x: int = 0\nclass Ordered:\n    x: int = 0\n"
    exec(compile(source, "<plugin>", "exec", dont_inherit=True), namespace)  # annotations evaluated, as a plugin's
    made = hydra_dataclasses.hydra_dataclass(namespace["Settings"])
    assert not hasattr(made, "__record__") and dataclasses.is_dataclass(made)
    assert hasattr(hydra_dataclasses.hydra_dataclass(namespace["Plain"]), "__record__")
    assert not hasattr(hydra_dataclasses.hydra_dataclass(order=True)(namespace["Ordered"]), "__record__")
    for options in ({"frozen": True}, {"repr": False}, {"frozen": True, "repr": False}):  # util/records.py's options
        assert hasattr(hydra_dataclasses.hydra_dataclass(**options)(type("Optioned", (namespace["Plain"],), {
            "__annotations__": {"y": int}, "y": 1, "__module__": "hydra_plugins.example"})), "__record__"), options
    assert not hasattr(hydra_dataclasses.hydra_dataclass(frozen=1)(namespace["Settings"]), "__record__")
    other = type("Elsewhere", (), {"__annotations__": {"x": int}, "x": 0, "__module__": "mypackage.hydra"})
    assert not hasattr(hydra_dataclasses.hydra_dataclass(other), "__record__")  # another package's class: standard


HYDRAS_CONFIG_SCRIPT = """
import json, sys
import primus_hydra
primus_hydra.compose  # the API imports Hydra
from hydra.conf import HydraConf
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
stored = ConfigStore.instance().repo["hydra"]["config.yaml"]
before = stored.__dict__["_conversion"].converted is None
cfg = primus_hydra.compose(["model=moe_tiny"])
after_compose = stored.__dict__["_conversion"].converted is None
loaded = ConfigStore.instance().load("hydra/config.yaml").node
unneeded = sorted({"importlib.resources", "tempfile", "shutil"} & set(sys.modules))  # importlib.abc's imports
import re, yaml
lazy = yaml.reader.Reader.NON_PRINTABLE
compiled_when_used = [type(lazy).__name__, lazy._compiled is None]
def read_by_python(text):
    try:
        return yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        return str(error)
read = [read_by_python(text) for text in ("a: 1", "a: \\x01", "a: \\ufffe")]
compiled_when_used += [lazy._compiled is not None, lazy.pattern, read,
                       (re.compile.__module__, re.compile.__qualname__) == ("re", "compile")]  # given back
print(json.dumps([unneeded, compiled_when_used, before, after_compose, OmegaConf.to_yaml(loaded) == OmegaConf.to_yaml(OmegaConf.structured(HydraConf())),
                  hasattr(HydraConf, "__record__"), type(sys.modules["hydra.core.config_store"].__loader__).__name__]))
"""


STANDARD_YAML_READING = """
import json, yaml
def read_by_python(text):
    try:
        return yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        return str(error)
print(json.dumps([yaml.reader.Reader.NON_PRINTABLE.pattern, [read_by_python(text) for text in ("a: 1", "a: \\x01", "a: \\ufffe")]]))
"""


def test_hydras_own_config_is_converted_when_first_loaded_and_a_composition_needs_it_not():
    """... and the import hook imports nothing a composition does not need (~60 modules' objects that every later
    collection and the interpreter's teardown pass over)."""
    done = subprocess.run([sys.executable, "-c", HYDRAS_CONFIG_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    unneeded, compiled_when_used, *converted = json.loads(done.stdout)
    assert unneeded == [] and converted == [True, True, True, True, "_HookedLoader"]
    standard = subprocess.run([sys.executable, "-c", STANDARD_YAML_READING], capture_output=True, text=True, timeout=60)
    assert standard.returncode == 0, standard.stderr[-2000:]
    assert compiled_when_used[:3] == ["PatternCompiledWhenUsed", True, True] and compiled_when_used[5] is True
    assert compiled_when_used[3:5] == json.loads(standard.stdout)  # the same pattern, the same reading and errors
    read = compiled_when_used[4]
    assert all("special characters are not allowed" in error for error in read[1:]), read


def _printed(args: list[str], hydra_first: bool) -> str:
    """What `python -m primus_hydra ARGS` prints; with hydra_first, Hydra imported before, the standard way."""
    code = ("import hydra, runpy, sys; sys.argv[0] = 'primus_hydra'; runpy.run_module('primus_hydra', "
            "run_name='__main__')") if hydra_first else "import runpy; runpy.run_module('primus_hydra', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return re.sub(r"\d\d-\d\d-\d\d\.\d{6}", "<time>", f"{done.returncode}\n{done.stdout}{done.stderr}")


@pytest.mark.parametrize("args", [["--cfg", "all"], ["backend=megatron", "model=llama3_8b", "--info"],
                                  ["model=nope"], ["-m", "module.lr=1e-3,2e-3", "--cfg", "hydra"]])
def test_the_command_line_prints_what_it_prints_with_hydra_imported_the_standard_way(args):
    assert _printed(args, hydra_first=False) == _printed(args, hydra_first=True)
