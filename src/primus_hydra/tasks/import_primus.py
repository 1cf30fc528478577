"""task=import: Primus experiment files (one, or every one under a folder) as experiments of a Hydra config dir.

    python -m primus_hydra task=import task.source=<file or folder> [task.primus_root=<Primus checkout>]
        [task.out=./primus_conf]

Reading follows Primus's own loader (migrate/primus_yaml.py, bounded by migrate/source_files.py); each key's
canonical home is in migrate/mapping.py; every generated text goes through migrate/emit.py. An experiment is
reported `ok` only after it composes and passes the rules every run is prepared against (tasks/import_composition.py,
in worker processes: tasks/import_checks.py); its files are then written together (tasks/import_session.py), and
only where migrate/ledger.py says nothing of the user's is replaced. Nothing runs, and nothing but task.out is
written (no run dir).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

from omegaconf import DictConfig

from primus_hydra.config.paths import writable_dir_failure
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.emit import comment
from primus_hydra.migrate.writer import run_command
from primus_hydra.tasks.import_checks import checked_workers, import_workers
from primus_hydra.tasks.import_composition import compose_imported
from primus_hydra.tasks.import_session import ImportResult, ImportSession
from primus_hydra.util.tables import aligned_table

PROGRESS_EVERY_S = 5.0


class ImportInterrupted(PrimusError):
    exit_code = 130


class ImportTask:
    writes_nothing = True  # but task.out: no run dir, whatever hydra.run.dir says (tasks/callback.py)

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    def run(self) -> list[ImportResult]:
        task = self.cfg.task
        wanted_workers = checked_workers(task.get("workers"))
        source = _checked_source(task.get("source"))
        root = find_primus_root(source, task.get("primus_root"))
        out = _checked_out(task.get("out"))
        folder_mode = source.is_dir()
        files = list(source_files(source, out)) if folder_mode else [source]
        if folder_mode and not files:
            raise PrimusError(f"task.source={source}: no YAML files under it")
        base = source if folder_mode else source.parent
        workers = import_workers(wanted_workers, len(files))
        session = ImportSession(root, out, dict(os.environ))
        results: list[ImportResult] = []
        progress = _Progress(len(files)) if folder_mode else None
        try:
            with contextlib.closing(session.import_all(files, base, workers)) as imported:
                for result in imported:
                    results.append(result)
                    if progress:
                        progress.tick(results)
        except KeyboardInterrupt:
            raise ImportInterrupted(f"interrupted after {session.finished} of {len(files)} file(s): {session.written} "
                                    f"experiment(s) written into {out}, each whole; nothing else was changed") from None
        finally:
            session.close()
        # a folder's files that are no LLM experiment are counted apart; a file named alone must be one
        failed = [result for result in results if result.failure and not (folder_mode and result.set_apart)]
        apart = [result for result in results if result.failure and result.set_apart and folder_mode]
        if folder_mode:
            print(summary_table(results, source))
        else:
            report_one(results[0], out)
        set_apart = f"; {len(apart)} set apart (no LLM experiment: what each is, above)" if apart else ""
        if failed:
            raise ImportFailedError(f"{len(failed)} of {len(results)} file(s) not imported{set_apart}"
                                    + ("" if folder_mode else f": {failed[0].source}: {failed[0].failure}"))
        if folder_mode:
            print(f"imported {len(results) - len(apart)} experiment(s) into {out}{set_apart}; run one: python -m "
                  f"primus_hydra --config-dir {shlex.quote(str(out))} experiment=<name>")
        return results


class ImportFailedError(PrimusError):
    """Some files were not imported (each named): the user's to fix, exit 2."""


def _checked_source(given) -> Path:
    if given is None or not str(given).strip():
        raise PrimusError("task.source is not set: give a Primus experiment file or a folder of them "
                          "(task.source=examples/megatron/configs/MI300X)")
    source = Path(str(given)).expanduser()
    if not source.exists():
        raise PrimusError(f"task.source={source}: no such file or folder")
    return source


def _checked_out(given) -> Path:
    failure = writable_dir_failure("task.out", given, "give a folder to write the config dir into "
                                                      "(task.out=primus_conf)")
    if failure:
        raise PrimusError(failure)
    return Path(str(given).strip()).expanduser()


def source_files(source: Path, out: Path) -> Iterator[Path]:
    """Every *.yaml / *.yml under the folder, in sorted order, links to folders not followed, task.out left out
    (an out dir inside the source is never read back as sources)."""
    skipped = out.resolve()
    for folder, subfolders, names in os.walk(source):
        here = Path(folder)
        subfolders[:] = sorted(name for name in subfolders if (here / name).resolve() != skipped)
        for name in sorted(names):
            if name.endswith((".yaml", ".yml")):
                yield here / name


def find_primus_root(source: Path, given: Optional[str]) -> Path:
    if given:
        root = Path(str(given)).expanduser()
        if not (root / "primus" / "configs").is_dir():
            raise PrimusError(f"task.primus_root={root}: not a Primus checkout (it has no primus/configs)")
        return root
    for folder in [source.resolve(), *source.resolve().parents]:
        if (folder / "primus" / "configs").is_dir():
            return folder
    raise PrimusError(f"task.primus_root is not set and no Primus checkout contains {source}; set "
                      f"task.primus_root=<the Primus checkout whose presets the experiments name>")


class _Progress:
    """A line on stderr every few seconds while a folder imports."""

    def __init__(self, total: int):
        self.total, self.last = total, time.monotonic()

    def tick(self, results: list[ImportResult]) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S and len(results) < self.total:
            self.last = now
            ok = sum(1 for result in results if not result.failure)
            print(f"task=import: {len(results)} of {self.total} file(s) read, {ok} imported", file=sys.stderr,
                  flush=True)


def report_one(result: ImportResult, out: Path) -> None:
    for warning in result.warnings:
        print(f"warning: {comment(warning)[2:]}", file=sys.stderr)
    if result.failure:
        return
    print(f"wrote {result.experiment} (backend={result.backend}, model={result.model}, "
          f"{result.passed_through} key(s) passed through)")
    print(f"run it: {run_command(out, result.name)}")


def summary_table(results: list[ImportResult], base: Path) -> str:
    rows = []
    for result in results:
        status = f"{'set apart' if result.set_apart else 'skipped'}: {result.failure}" if result.failure else \
            ("ok" + (f", {len(result.warnings)} warning(s)" if result.warnings else ""))
        rows.append((comment(result.source.relative_to(base).as_posix())[2:], result.backend, result.model,
                     str(result.passed_through) if not result.failure else "-", comment(status)[2:]))
    return aligned_table(("file", "backend", "model", "passed through", "status"), rows, rule=True)


def dry_run_mismatches(name: str, out, framework: str, primus: dict, run_dir, gpus: int = 8,
                       passed: tuple = ()) -> list[str]:
    """Composes experiment=<name> from the config dir `out` (as `--config-dir out` does), dry-runs it into run_dir
    and compares its exported arguments with Primus's (the checked keys, and `passed`: the keys passed through);
    a run that fails is one entry saying why."""
    import yaml

    from primus_hydra.migrate.check import mismatches
    from primus_hydra.runtime.train_runtime import DRY_RUN_FILE
    from primus_hydra.tasks.train import TrainTask

    try:
        TrainTask(compose_imported(name, Path(out), "task.dry_run=true"), run_dir=Path(run_dir)).run()
    except PrimusError as error:
        return [f"dry run failed: {str(error).splitlines()[0]}"]
    except Exception as error:  # noqa: BLE001 - composition errors: reported as the check's result
        return [f"dry run failed: {type(error).__name__}: {str(error).splitlines()[0]}"]
    exported = yaml.safe_load((Path(run_dir) / DRY_RUN_FILE).read_text())
    return mismatches(framework, primus, exported, gpus, passed)
