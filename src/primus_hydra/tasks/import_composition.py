"""What task=import composes: each imported experiment, as `python -m primus_hydra --config-dir <out>
experiment=<name>` would, to check it before it is written (composition_failure), and for the dry runs that compare
it with Primus's values (compose_imported).

An imported experiment is a `# @package _global_` file whose defaults only choose the backend, model and module
groups (`override /backend: megatron`), with its own values after them. Hydra composes such an experiment as the
config of those choices, then its values merged last. The check composes exactly that: the config of the choices
is composed once per process (by config/job_composition.py: Hydra's own defaults tree, and its merges with the
model's config merged last, tasks/import_bases.py) and kept; each experiment is a copy of it with its values merged,
as Hydra's composition merges them (~15 ms a file where a whole composition takes ~65; a folder of Primus's
examples has ~100 distinct choices for ~390 experiments). An
experiment of another shape (a `hydra:` section, another defaults entry, `model.from_hf`), or one whose merge fails,
is composed whole, so that every error reads as Hydra's. tests/unit/test_import_composition.py holds the two equal,
node for node, for the fixtures of every framework; scripts/check_primus_import.py for Primus's examples.

The check of such an experiment is a function of what it composes from: its header, its text after the header (the
comments there name the file it came from), and the chosen files; and of the process's environment and directory,
which its values may read. Its result is kept under those (ImportedShape.key, the environment, the directory):
a third of Primus's examples repeat another's values under another name (one experiment per GPU model, say), and
each repeat is answered without composing or checking it again (~40 ms a file).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf, flag_override, open_dict, read_write

from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config.error_format import format_compose_error, is_compose_error
from primus_hydra.config.fast_composition import install as install_fast_composition
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.writer import hydra_value
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.tasks.import_bases import MODEL_GROUP, model_merged_last

CHOSEN_GROUPS = ("backend", "model", "module")  # what an imported experiment's defaults choose
GLOBAL_PACKAGE_HEADER = "# @package _global_\n"
BASES_KEPT = 256
CHECKS_KEPT = 4096
_bases: dict[tuple, DictConfig] = {}  # the config of an experiment's choices -> composed (this process's)
_checks: dict[tuple, Optional[str]] = {}  # (ImportedShape.key, cwd, environment) -> composition_failure's answer


def composition_failure(name: str, config_dir: Path) -> Optional[str]:
    """Why `experiment=<name>` from `config_dir` does not compose and pass the rules every run is prepared against
    (those that depend on no machine); None: it does. The answer for a file of the imported shape is kept under
    what it composes from (the module's docstring)."""
    shape = imported_shape(name, config_dir)
    # what the check reads besides the files: the environment (`${oc.env:...}`) and the directory paths start from
    key = (shape.key, os.getcwd(), frozenset(os.environ.items())) if shape is not None else None
    if key in _checks:
        return _checks[key]
    composed = shape.merged() if shape is not None else None
    failure = _prepare_failure(lambda: composed if composed is not None else _composed_whole(name, config_dir))
    if composed is not None:  # composed from its choices: no line of the answer names the file
        if len(_checks) >= CHECKS_KEPT:
            _checks.clear()
        _checks[key] = failure
    return failure


def _prepare_failure(job) -> Optional[str]:
    try:
        prepare(job(), on_this_machine=False, trains=False, handed_over=True)
    except PrimusError as error:
        return "; ".join(str(error).splitlines())
    except Exception as error:  # noqa: BLE001 - a composition error: reported as the check's result
        if is_compose_error(error):
            return format_compose_error(error)
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None


def compose_imported(name: str, config_dir: Path, *extra: str) -> DictConfig:
    """experiment=<name> composed as `--config-dir config_dir` composes it, without touching Hydra's global state
    (a task=import runs inside the command line's own Hydra app)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode

    install_fast_composition()
    register_schemas()
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(find_conf_dir()))
    return loader.load_configuration("config", _imported_overrides(name, config_dir, *extra), RunMode.RUN)


def compose_imported_job(name: str, config_dir: Path) -> DictConfig:
    """compose_imported's config without its `hydra` node: from the composed config of its choices where the file
    has the imported shape (the module's docstring), else _composed_whole."""
    composed = composed_from_choices(name, config_dir)  # which installs and registers what composing needs
    return composed if composed is not None else _composed_whole(name, config_dir)


def _composed_whole(name: str, config_dir: Path) -> DictConfig:
    """experiment=<name>'s job config composed without Hydra's own config where that gives the same
    (config/job_composition.py), else by compose_imported."""
    composed = compose_job_config(find_conf_dir(), "config", _imported_overrides(name, config_dir))
    if composed is None:
        composed = compose_imported(name, config_dir)
        with read_write(composed), open_dict(composed):  # this composition is ours alone: no copy without the node
            composed.pop("hydra", None)
    return composed


def composed_from_choices(name: str, config_dir: Path) -> Optional[DictConfig]:
    """experiment=<name>'s job config as the config of its group choices with its values merged; None where the
    file is not of the imported shape or anything fails (the caller composes it whole)."""
    shape = imported_shape(name, config_dir)
    return shape.merged() if shape is not None else None


@dataclass
class ImportedShape:
    """An experiment of the imported shape: its own values (no defaults) and the composed config of its choices.
    `key` is everything its composition reads: the header lines Hydra reads, the text after them, and the chosen
    files' (_base_config's key)."""

    values: DictConfig
    base: DictConfig
    key: tuple

    def merged(self) -> Optional[DictConfig]:
        """A copy of the base with the values merged as Hydra merges them; None where that fails or where the
        model comes from a Hugging Face folder (composed whole)."""
        try:
            cfg = copy.deepcopy(self.base)
            with flag_override(cfg, "struct", False):  # as Hydra merges: its struct flag is set after the last config
                cfg.merge_with(self.values)
        except Exception:  # noqa: BLE001 - composed whole, which words the error as Hydra does
            return None
        return None if OmegaConf.select(cfg, "model.from_hf", default=None) is not None else cfg


def imported_shape(name: str, config_dir: Path) -> Optional[ImportedShape]:
    """experiment=<name> from config_dir as an ImportedShape; None where it is of another shape or anything fails."""
    install_fast_composition()
    register_schemas()
    try:
        text = (Path(config_dir) / "experiment" / f"{name}.yaml").read_text()
        if not text.startswith(GLOBAL_PACKAGE_HEADER) and f"\n{GLOBAL_PACKAGE_HEADER}" not in text:
            return None
        values = OmegaConf.create(text)
        choices = _group_choices(values)
        if choices is None or "hydra" in values:
            return None
        with flag_override(values, ["struct", "readonly"], False):
            del values["defaults"]
        base_key = _base_key(choices, config_dir)
        base = _base_config(choices, config_dir, base_key)
    except Exception:  # noqa: BLE001 - composed whole, which words the error as Hydra does
        return None
    return ImportedShape(values, base, (*_header_and_body(text), base_key)) if base is not None else None


def _header_and_body(text: str) -> tuple[tuple[str, ...], str]:
    """(the header lines Hydra reads: `# @...` among the comment and blank lines the file starts with, the text from
    the first other line): two files with the same are the same config, whatever else their first comments say."""
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].lstrip().startswith("#")):
        start += 1
    header = tuple(line.strip() for line in lines[:start] if line.lstrip()[1:].strip().startswith("@"))
    return header, "".join(lines[start:])


def _group_choices(values: DictConfig) -> Optional[list[tuple[str, str]]]:
    """[(group, option)] of an experiment whose defaults are only `override /<group>: <option>` of CHOSEN_GROUPS."""
    if "defaults" not in values:
        return []
    entries = OmegaConf.to_container(values.defaults)
    if not isinstance(entries, list):
        return None
    choices = []
    for entry in entries:
        if not isinstance(entry, dict) or len(entry) != 1:
            return None
        (key, option), = entry.items()
        words = str(key).split()
        if len(words) != 2 or words[0] != "override" or words[1].lstrip("/") not in CHOSEN_GROUPS \
                or not words[1].startswith("/") or not isinstance(option, str):
            return None
        choices.append((words[1].lstrip("/"), option))
    return choices


def _base_key(choices: list[tuple[str, str]], config_dir: Path) -> tuple:
    """What the config of `choices` reads from config_dir: the text of each chosen file it holds (the rest is this
    project's conf/)."""
    return tuple((group, option, _text_or_none(Path(config_dir) / group / f"{option}.yaml"))
                 for group, option in choices)


def _base_config(choices: list[tuple[str, str]], config_dir: Path, key: tuple) -> Optional[DictConfig]:
    """The job config of `choices` from config_dir and this project's conf/ (kept under _base_key)."""
    base = _bases.get(key)
    if base is None:
        overrides = [f"{group}={hydra_value(option)}" for group, option in choices]
        others = tuple(entry for entry in key if entry[0] != MODEL_GROUP)  # what the configs besides the model's read
        base = compose_job_config(find_conf_dir(), "config", [*overrides, _search_path_override(config_dir)],
                                  model_merged_last(others))
        if base is None:
            return None
        if len(_bases) >= BASES_KEPT:
            _bases.clear()
        _bases[key] = base
    return base


def _text_or_none(path: Path) -> Optional[str]:
    try:
        return path.read_text()
    except OSError:
        return None


def _imported_overrides(name: str, config_dir: Path, *extra: str) -> list[str]:
    return [f"experiment={hydra_value(name)}", _search_path_override(config_dir), *extra]


def _search_path_override(config_dir: Path) -> str:
    return f"hydra.searchpath=[{hydra_value('file://' + str(Path(config_dir).resolve()))}]"
