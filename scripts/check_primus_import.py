"""By hand, against a Primus checkout: import every experiment under a folder (task=import's own code), dry-run
each imported experiment and compare its exported backend arguments with what Primus's loader resolves
(migrate/check.py). Prints one line per file that did not import or does not match, then the counts.

Usage: python scripts/check_primus_import.py PRIMUS_ROOT [FOLDER, default: PRIMUS_ROOT/examples] [OUT]"""
from __future__ import annotations

import collections
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from primus_hydra.migrate.primus_yaml import load_experiment
from primus_hydra.tasks.import_checks import import_workers
from primus_hydra.tasks.import_primus import dry_run_mismatches, source_files
from primus_hydra.tasks.import_session import gpus_per_node, import_files


def main() -> None:
    root = Path(sys.argv[1])
    folder = Path(sys.argv[2]) if len(sys.argv) > 2 else root / "examples"
    out = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(tempfile.mkdtemp(prefix="primus_import_"))
    logging.disable(logging.WARNING)
    files = list(source_files(folder, out))
    started = time.perf_counter()
    results = import_files(files, folder, root, out, dict(os.environ), import_workers(None, len(files)))
    per_file = (time.perf_counter() - started) / max(1, len(files))
    counts = collections.Counter()
    for result in results:
        framework = result.source.relative_to(folder).parts[0]
        if result.failure:
            kind = "set apart (no LLM experiment)" if result.set_apart else "not imported"
            counts[f"{framework}: {kind}"] += 1
            print(f"{'set apart' if result.set_apart else 'not imported':12s}  {result.source.relative_to(folder)}: "
                  f"{result.failure}")
            continue
        experiment = load_experiment(result.source, root, dict(os.environ))
        module = experiment.modules[0]
        with tempfile.TemporaryDirectory() as run_dir:
            problems = dry_run_mismatches(result.name, out, module.framework, module.params, run_dir,
                                          gpus_per_node(experiment), result.passed_keys)
        counts[f"{framework}: {'mismatch' if problems else 'ok'}"] += 1
        if problems:
            print(f"mismatch      {result.source.relative_to(folder)}: {'; '.join(problems[:4])}")
    print(f"\n{len(files)} files, import {per_file * 1000:.1f} ms per file; out: {out}")
    for key, count in sorted(counts.items()):
        print(f"  {key:40s} {count}")


if __name__ == "__main__":
    main()
