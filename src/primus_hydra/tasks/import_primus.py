"""task=import: Primus experiment files (one, or every one under a folder) as experiments of a Hydra config dir.

    python -m primus_hydra task=import task.source=<file or folder> [task.primus_root=<Primus checkout>]
        [task.out=./primus_conf]

Reading follows Primus's own loader (migrate/primus_yaml.py); each key's canonical home is in migrate/mapping.py.
Nothing runs and nothing but task.out is written; a file of the user's there is never overwritten.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from primus_hydra.errors import PrimusError
from primus_hydra.tables import aligned_table


class ImportFailedError(PrimusError):
    exit_code = 1


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


class ImportTask:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    def run(self) -> list[ImportResult]:
        task = self.cfg.task
        if not task.get("source"):
            raise PrimusError("task.source is not set: give a Primus experiment file or a folder of them "
                              "(task.source=examples/megatron/configs/MI300X)")
        source = Path(str(task.source)).expanduser()
        if not source.exists():
            raise PrimusError(f"task.source={source}: no such file or folder")
        root = find_primus_root(source, task.get("primus_root"))
        out = Path(str(task.get("out") or "primus_conf")).expanduser()
        folder_mode = source.is_dir()
        files = sorted(p for p in source.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()) \
            if folder_mode else [source]
        if folder_mode and not files:
            raise PrimusError(f"task.source={source}: no YAML files under it")
        results = import_files(files, source if folder_mode else source.parent, root, out, dict(os.environ))
        failed = [result for result in results if result.failure]
        if folder_mode:
            print(summary_table(results, source))
        else:
            report_one(results[0], out)
        if failed:
            raise ImportFailedError(f"{len(failed)} of {len(results)} file(s) not imported"
                                    + ("" if folder_mode else f": {failed[0].failure}"))
        if folder_mode:
            print(f"imported {len(results)} experiment(s) into {out}; run one: python -m primus_hydra "
                  f"--config-dir {out} experiment=<name>")
        return results


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


def import_files(files: list[Path], base: Path, root: Path, out: Path, environ: dict) -> list[ImportResult]:
    from primus_hydra.migrate.mapping import FRAMEWORKS, import_module
    from primus_hydra.migrate.primus_yaml import load_experiment, plain
    from primus_hydra.migrate.writer import RESOLVED_DIR, experiment_text, resolved_text, write_if_ours

    cache: dict = {}
    written: dict[str, str] = {}  # model files written by this import: name -> text
    results = []
    for path in files:
        result = ImportResult(path)
        try:
            experiment = load_experiment(path, root, environ, cache, FRAMEWORKS)
            if len(experiment.modules) != 1:
                raise PrimusError(f"{path}: {len(experiment.modules)} trainer modules; an experiment here trains one")
            module = experiment.modules[0]
            imported = import_module(module, root, environ, gpus_per_node(experiment))
            imported.warnings[:0] = experiment.warnings
            name = path.relative_to(base).with_suffix("").as_posix()
            if imported.model.name:
                write_model_file(imported, f"{module.framework}/{plain(module.model)}", out, written)
            target = out / "experiment" / f"{name}.yaml"
            write_if_ours(target, experiment_text(experiment, module, imported, name, out))
            write_if_ours(out / RESOLVED_DIR / f"{name}.yaml", resolved_text(experiment, module))
            result.experiment, result.name, result.backend = target, name, imported.backend
            result.model, result.passed_through = imported.model.preset, len(imported.extra_args)
            result.warnings = tuple(imported.warnings)
        except PrimusError as error:
            result.failure = str(error).replace(f"{path}: ", "", 1)
        results.append(result)
    return results


def write_model_file(imported, source: str, out: Path, written: dict) -> None:
    """<out>/model/<name>.yaml; two different generated models of one name in one import get distinct names
    (the second one's name ends in a digest of its numbers), so that neither experiment's model changes."""
    import hashlib

    from primus_hydra.migrate.writer import model_file, write_if_ours

    name, text = model_file(imported, source)
    body = text.split("\n", 2)[-1]  # without the header, which names the source
    if name in written and written[name] != body:
        imported.model.name = f"{name}_{hashlib.sha1(body.encode()).hexdigest()[:6]}"
        name, text = model_file(imported, source)
        body = text.split("\n", 2)[-1]
    written[name] = body
    write_if_ours(out / "model" / f"{name}.yaml", text)


def gpus_per_node(experiment) -> int:
    """The experiment's env GPUS_PER_NODE (Primus's launcher reads it), else Primus's default of 8."""
    from primus_hydra.migrate.mapping import GPUS_PER_NODE
    from primus_hydra.migrate.primus_yaml import plain

    value = plain(experiment.env.get("GPUS_PER_NODE", GPUS_PER_NODE))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PrimusError(f"{experiment.path}: env GPUS_PER_NODE={value!r} is not a number of GPUs") from None


def report_one(result: ImportResult, out: Path) -> None:
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if result.failure:
        return
    print(f"wrote {result.experiment} (backend={result.backend}, model={result.model}, "
          f"{result.passed_through} key(s) passed through)")
    print(f"run it: python -m primus_hydra --config-dir {out} experiment={result.name}")


def summary_table(results: list[ImportResult], base: Path) -> str:
    rows = []
    for result in results:
        status = f"skipped: {result.failure}" if result.failure else \
            ("ok" + (f", {len(result.warnings)} warning(s)" if result.warnings else ""))
        rows.append((result.source.relative_to(base).as_posix(), result.backend, result.model,
                     str(result.passed_through) if not result.failure else "-", status))
    return aligned_table(("file", "backend", "model", "passed through", "status"), rows, rule=True)


def dry_run_mismatches(name: str, out, framework: str, primus: dict, run_dir, gpus: int = 8) -> list[str]:
    """Composes experiment=<name> from the config dir `out` (as `--config-dir out` does), dry-runs it into run_dir
    and compares its exported arguments with Primus's; a run that fails is one entry saying why."""
    from pathlib import Path

    import yaml
    from hydra import compose, initialize_config_dir

    from primus_hydra.config.paths import find_conf_dir
    from primus_hydra.config.schema import register_schemas
    from primus_hydra.migrate.check import mismatches
    from primus_hydra.runtime.train_runtime import DRY_RUN_FILE
    from primus_hydra.tasks.train import TrainTask

    register_schemas()
    overrides = [f"experiment={name}", "task.dry_run=true", f"hydra.searchpath=[file://{Path(out).resolve()}]"]
    try:
        with initialize_config_dir(config_dir=find_conf_dir(), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        TrainTask(cfg, run_dir=Path(run_dir)).run()
    except PrimusError as error:
        return [f"dry run failed: {str(error).splitlines()[0]}"]
    except Exception as error:  # noqa: BLE001 - composition errors: reported as the check's result
        return [f"dry run failed: {type(error).__name__}: {str(error).splitlines()[0]}"]
    exported = yaml.safe_load((Path(run_dir) / DRY_RUN_FILE).read_text())
    return mismatches(framework, primus, exported, gpus)
