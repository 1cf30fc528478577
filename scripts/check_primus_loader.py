"""By hand, against a Primus checkout: generated experiment trees (tests/helpers/primus_random_trees.py) read by
Primus's own loader (its load_primus_config / PrimusParser, unmodified), by task=import's reading
(migrate/primus_yaml.py) and by the tests' oracle (tests/helpers/primus_reference.py); prints how often each agrees
with Primus on the trainer's `params` (values and types), and the first differences.

Usage: python scripts/check_primus_loader.py PRIMUS_ROOT [N=300]

Primus's package is copied into a temporary folder (its loader finds presets next to its own code), the trees are
written into that copy, and each experiment is parsed there in a temporary working directory (Primus's parser
creates output folders as it reads).
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.primus_random_trees import TreeMaker  # noqa: E402
from helpers.primus_reference import primus_params  # noqa: E402
from primus_hydra.migrate.emit import same_value  # noqa: E402
from primus_hydra.migrate.primus_yaml import load_experiment, plain  # noqa: E402


def primus_own(path: Path, environ: dict):
    from primus.core.config.primus_config import load_primus_config, nested_namespace_to_dict

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environ)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cfg = load_primus_config(path)
        return nested_namespace_to_dict(cfg.modules[0].params)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def read_params(path: Path, root: Path, environ: dict) -> dict:
    return plain(load_experiment(path, root, environ).modules[0].params)


def outcome(function, *args):
    try:
        return ("ok", function(*args))
    except (Exception, SystemExit) as error:  # noqa: BLE001 - a refusal is an outcome to compare
        return ("refused", type(error).__name__)


def agree(a, b) -> bool:
    return a[0] == b[0] == "refused" or (a[0] == b[0] == "ok" and same_value(a[1], b[1]))


def main() -> None:
    checkout, count = Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 300
    work = Path(tempfile.mkdtemp(prefix="primus_loader_"))
    root = work / "root"
    shutil.copytree(checkout / "primus", root / "primus")
    sys.path.insert(0, str(root))
    os.chdir(work)
    ours_agree = reference_agree = refused = 0
    shown = 0
    for index in range(count):
        maker = TreeMaker(index)
        path = maker.write(root, index)
        primus = outcome(primus_own, path, maker.environ)
        ours = outcome(read_params, path, root, maker.environ)
        reference = outcome(primus_params, path, root, maker.environ)
        ours_agree += agree(ours, primus)
        refused += primus[0] == "refused"
        reference_agree += agree(reference, primus)
        if not (agree(ours, primus) and agree(reference, primus)) and shown < 5:
            shown += 1
            print(f"tree {index}: primus={primus}\n  ours={ours}\n  reference={reference}\n")
    print(f"{count} trees ({refused} refused by Primus): task=import's reading agrees with Primus on {ours_agree}, "
          f"the tests' oracle on {reference_agree}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
