"""task=import's work on each file: read with Primus's semantics, mapped, staged, checked (tasks/import_checks.py,
tasks/import_composition.py) and written into the config dir, in the files' order (ImportSession); import_files is
task=import's code for a list of files, as scripts and tests call it."""
from __future__ import annotations

import contextlib
import gc
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from primus_hydra.config.fast_composition import install as install_fast_composition
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.ledger import Ledger, _atomic_write, digest
from primus_hydra.migrate.mapping import FRAMEWORKS, GPUS_PER_NODE, import_module
from primus_hydra.migrate.primus_yaml import SetApart, from_environment, load_experiment, plain
from primus_hydra.migrate.torchtitan_flavors import read_tables_ahead
from primus_hydra.migrate.torchtitan_registry import stop_reading
from primus_hydra.migrate.writer import RESOLVED_DIR, experiment_text, model_text, resolved_text
from primus_hydra.tasks.import_checks import checked_in_order
from primus_hydra.tasks.import_composition import composition_failure


@dataclass
class ImportResult:
    source: Path
    experiment: Optional[Path] = None  # the file written (None: not imported)
    name: str = ""  # experiment=<name>
    backend: str = "-"
    model: str = "-"
    passed_through: int = 0
    warnings: tuple = ()
    failure: str = ""
    passed_keys: tuple = ()  # the keys passed through to the backend (backend.extra_args), for the check
    set_apart: bool = False  # the failure says what the file is: no LLM experiment (migrate/primus_yaml.SetApart)


def import_files(files: list[Path], base: Path, root: Path, out: Path, environ: dict,
                 workers: int = 1) -> list[ImportResult]:
    """Each file imported into `out` (names relative to `base`), as task=import does (its checks in `workers`
    processes)."""
    session = ImportSession(root, out, environ)
    try:
        return list(session.import_all(files, base, workers))
    finally:
        session.close()


@dataclass
class StagedImport:
    """A file read and mapped, with the files it would write, those the check composes staged in `folder`; or, when
    `result.failure` is set, why it is not imported."""

    result: ImportResult
    name: str = ""
    source: str = ""
    files: dict = field(default_factory=dict)  # relative path -> (text, private)
    model: Optional[tuple] = None  # (relative path, text) of its generated model
    model_source: str = ""
    folder: Optional[Path] = None  # the config dir its check composes from
    imported: Any = None  # what migrate/mapping.py made of its module (Imported)

    def check_arguments(self) -> Optional[tuple]:
        return (self.name, self.folder) if self.folder is not None and not self.result.failure else None

    def choices(self) -> str:
        """The group choices of its experiment (the defaults lines), which checks share the composition of."""
        text = self.files.get(f"experiment/{self.name}.yaml", ("", False))[0]
        return "\n".join(line for line in text.splitlines() if line.startswith("- override /"))


class ImportSession:
    """One import run: the files read, the names taken, the config dir's ledger and the staging folder in which
    each experiment is composed before its files are written."""

    def __init__(self, root: Path, out: Path, environ: dict):
        install_fast_composition()  # as the command line has: the zoo's presets and the checks read YAML through it
        self.root, self.out, self.environ = root, out, environ
        self.ledger = Ledger(out)
        self.cache: dict = {}
        self.names: dict[str, Path] = {}  # experiment name -> the source it was imported from, this run
        self.models: dict[str, str] = {}  # generated model name -> its text, this run
        self.written = 0  # experiments written, each with its files
        self.staged = 0  # files staged: each in a folder of its own, while earlier ones are checked
        self.finished = 0  # files imported or refused
        self.staging = Path(tempfile.mkdtemp(prefix="primus_import_"))

    def close(self) -> None:
        stop_reading()
        shutil.rmtree(self.staging, ignore_errors=True)

    def import_all(self, files: list[Path], base: Path, workers: int = 1) -> Iterator[ImportResult]:
        """Each file's result, in the files' order: read, mapped and staged here, checked in `workers` processes
        (tasks/import_checks.py), written here. Ctrl-C takes effect between two files' steps."""
        read_tables_ahead(files)  # torchtitan's flavor tables, in a helper process, where a file names torchtitan
        checked = checked_in_order(self._staged(files, base), StagedImport.check_arguments, composition_failure,
                                   workers, StagedImport.choices)
        with contextlib.closing(checked), _fewer_collections():  # stopped: the checks under way end first
            for staged, failure in checked:
                with _interrupt_deferred():  # never inside a library's half-done state, nor between two files' writes
                    result = self.finish(staged, failure)
                yield result

    def _staged(self, files: list[Path], base: Path) -> Iterator[StagedImport]:
        for path in files:
            with _interrupt_deferred():
                staged = self.stage(path, base)
            yield staged

    def stage(self, path: Path, base: Path) -> StagedImport:
        """The file read with Primus's semantics and mapped; what it would write staged for its check."""
        staged = StagedImport(ImportResult(path))
        with _failure_recorded(staged.result):
            self._stage(path, base, staged)
        return staged

    def finish(self, staged: StagedImport, check_failure: Optional[str]) -> ImportResult:
        """A staged file written into the config dir when its name is free, its files are replaceable and its check
        passed; else its result says why."""
        result = staged.result
        try:
            if not result.failure:
                with _failure_recorded(result):
                    self._write(staged, check_failure)
        finally:
            if staged.folder is not None:
                shutil.rmtree(staged.folder, ignore_errors=True)
        self.finished += 1
        return result

    def _stage(self, path: Path, base: Path, staged: StagedImport) -> None:
        name = experiment_name(path, base)
        experiment = load_experiment(path, self.root, self.environ, self.cache, FRAMEWORKS)
        if len(experiment.modules) != 1:
            raise PrimusError(f"{path}: {len(experiment.modules)} trainer modules; an experiment here trains one")
        module = experiment.modules[0]
        imported = import_module(module, self.root, self.environ, gpus_per_node(experiment))
        imported.warnings[:0] = experiment.warnings
        # a file that holds anything decided by a variable that was set (a model chosen by $PRIMUS_MODEL, numbers
        # the translation had to convert) is the user's only: 0600
        private = any(from_environment(part) for part in (module.params, module.model, experiment.env))
        staged.name, staged.source = name, str(path.resolve())
        staged.model = self._model_file(imported, module) if imported.model.name else None
        staged.model_source = f"{module.framework}/{module.config}"
        staged.files = {f"experiment/{name}.yaml": (experiment_text(experiment, module, imported, name, self.out),
                                                    private),
                        f"{RESOLVED_DIR}/{name}.yaml": (resolved_text(experiment, module), private)}
        self.staged += 1
        staged.folder = self.staging / str(self.staged)
        model = [(staged.model[0], (staged.model[1], False))] if staged.model else []
        for relative, (text, _) in [*staged.files.items(), *model]:
            if relative.startswith(("experiment/", "model/")):
                _atomic_write(staged.folder / relative, text, 0o600)
        staged.imported = imported

    def _write(self, staged: StagedImport, check_failure: Optional[str]) -> None:
        name, source = staged.name, staged.source
        if name in self.names:
            raise PrimusError(f"experiment={name} is already the import of {self.names[name]} (this run); a name holds "
                              f"one experiment: rename one of the two files")
        for relative in staged.files:
            self._check_replaceable(relative, source)
        if check_failure:  # composed from the config dir it is written into, it fails a rule every run is held to
            raise PrimusError(f"the imported experiment does not compose: {check_failure}")
        private = staged.files[f"experiment/{name}.yaml"][1]
        model = [(*staged.model, staged.model_source, private)] \
            if staged.model and not self.ledger.holds(*staged.model) else []
        self.ledger.write_all(model + [(relative, text, source, private) for relative, (text, private) in
                                       staged.files.items()])
        self.written += 1
        self.names[name] = staged.result.source
        result, imported = staged.result, staged.imported
        result.experiment, result.name, result.backend = self.out / f"experiment/{name}.yaml", name, imported.backend
        result.model, result.passed_through = imported.model.preset, len(imported.extra_args)
        result.warnings, result.passed_keys = tuple(imported.warnings), tuple(imported.extra_args)

    def _check_replaceable(self, relative: str, source: str) -> None:
        state = self.ledger.state(relative)
        if state == "kept":
            raise PrimusError(f"{self.out / relative} exists and is not what task=import wrote (edited since, or "
                              f"yours); kept, not overwritten (move it, or choose another task.out)")
        if state == "ours" and self.ledger.source_of(relative) != source:
            raise PrimusError(f"{self.out / relative} holds the import of {self.ledger.source_of(relative)}; not "
                              f"replaced by this file's (import their common folder, or choose another task.out)")

    def _model_file(self, imported, module) -> tuple[str, str]:
        """(relative path, text) of the generated model: the name it had, unless a file of that name holds other
        numbers (then the name ends in a digest of them): a model file never changes once written."""
        source = _plain_name(module.model)
        base_name = imported.model.name
        for name in (base_name, f"{base_name}_{digest(model_text(imported, source))[:8]}"):
            imported.model.name = name
            text, relative = model_text(imported, source), f"model/{name}.yaml"
            ours = self.ledger.holds(relative, text) or self.models.get(name) == text
            if ours or (self.ledger.state(relative) == "absent" and name not in self.models):
                self.models[name] = text
                return relative, text
        raise PrimusError(f"{self.out / relative} exists with other numbers and is not task=import's; not replaced")


@contextlib.contextmanager
def _failure_recorded(result: ImportResult) -> Iterator[None]:
    """An error while a file is imported becomes its result's one line: a folder's other files go on."""
    try:
        yield
    except PrimusError as error:
        result.failure = str(error).replace(f"{result.source}: ", "", 1)
        result.set_apart = isinstance(error, SetApart)
    except RecursionError:
        result.failure = "nested too deeply to read"
    except Exception as error:  # noqa: BLE001 - one file's bug must not abort a folder's other files
        result.failure = f"not imported: {type(error).__name__}: {error} (a bug of task=import: please report it)"


def experiment_name(path: Path, base: Path) -> str:
    name = path.relative_to(base).with_suffix("").as_posix()
    if any(not char.isprintable() for char in name):
        raise PrimusError(f"{path!r}: its name holds a control character, which no experiment name may hold; rename "
                          f"the file")
    return name


def _plain_name(value) -> str:
    return str(plain(value))


GC_THRESHOLDS = (10_000, 10, 10)  # while files are imported: Python's are (700, 10, 10)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cyclic collector runs a tenth as often while files are imported (their worker processes, forked
    inside, inherit it): each file makes ~100,000 short-lived config nodes, and the collections, each walking the
    configs and tables kept for later files, took ~3.5 ms of a file's ~60 (~1 ms so; scripts/bench/bench_import.py).
    Garbage is freed as before; a cycle waits a little longer."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Ctrl-C while a file is imported takes effect after it: its experiment's files are each whole, and no library
    (Hydra, OmegaConf) is interrupted halfway, which can turn the interrupt into some other error."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda *_: received.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def gpus_per_node(experiment) -> int:
    """The experiment's env GPUS_PER_NODE (Primus's launcher reads it), else Primus's default of 8."""
    value = plain(experiment.env.get("GPUS_PER_NODE", GPUS_PER_NODE))
    try:
        if isinstance(value, bool) or int(value) < 1:
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise PrimusError(f"{experiment.path}: env GPUS_PER_NODE={value!r} is not a number of GPUs") from None
