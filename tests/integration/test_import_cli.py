"""task=import as a user meets it on the command line: one `error:` line naming the file and exit 2 for what is not
importable (no traceback, no hang), Ctrl-C as one line saying what was written, a printed `run it:` command that
runs whatever the experiment is called, and a smuggled Hydra callback that never runs."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers.cli import clean_env, primus
from helpers.primus_tree import META, write_primus_tree
from helpers.primus_tree import TRAINER as FIXTURE_TRAINER
from primus_hydra.migrate.writer import hydra_value

pytestmark = pytest.mark.integration

TRAINER = FIXTURE_TRAINER + "    overrides: {train_iters: 5}\n"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_primus_tree(tmp_path_factory.mktemp("primus"))


@pytest.mark.parametrize("make, expected", [
    (lambda p: os.mkfifo(p), "a FIFO, not a regular file"),
    (lambda p: p.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))),
     "expands to more than 200000 values"),
    (lambda p: [p.write_text("extends: x.yaml\n"), (p.parent / "x.yaml").write_text(f"extends: {p.name}\n")],
     "`extends` runs in a circle"),
])
def test_a_file_that_is_no_experiment_is_one_line_and_exit_2(tree, tmp_path, make, expected):
    path = tmp_path / "bad.yaml"
    make(path)
    result = primus("task=import", f"task.source={path}", f"task.primus_root={tree}", f"task.out={tmp_path / 'out'}",
                    cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: 1 of 1 file(s) not imported: {path}: ") and expected in result.stderr
    assert not (tmp_path / "out" / "experiment").exists()


# enough that the import is still running when Ctrl-C comes on a loaded machine (~16 ms an experiment, the first
# written ~0.8 s after the start: 60 left a window of ~1 s, which a busy CI host's scheduling could miss)
EXPERIMENTS_TO_INTERRUPT = 400


@pytest.mark.parametrize("workers", ["task.workers=1", "task.workers=2"])
def test_ctrl_c_is_one_line_saying_what_was_written(tree, tmp_path, workers):
    folder = tmp_path / "src"
    folder.mkdir()
    for index in range(EXPERIMENTS_TO_INTERRUPT):
        (folder / f"exp{index:03d}.yaml").write_text(META + TRAINER)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "primus_hydra", "task=import", f"task.source={folder}",
                                f"task.primus_root={tree}", f"task.out={out}", workers], cwd=tmp_path, env=clean_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               # as at a terminal, even where the suite itself runs with SIGINT ignored (a
                               # background job of a shell): Python then leaves Ctrl-C ignored in the child too
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not list(out.glob("experiment/*.yaml")) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    written = len(list(out.glob("experiment/*.yaml")))
    assert process.returncode == 130, stderr
    assert 0 < written < EXPERIMENTS_TO_INTERRUPT
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted after ")
    assert f": {written} experiment(s) written into {out}, each whole" in stderr
    assert "Traceback" not in stderr


def test_a_folder_imports_the_same_with_one_or_two_checking_processes(tree, tmp_path):
    folder = tmp_path / "src"
    (folder / "more").mkdir(parents=True)
    for index in range(4):
        (folder / f"exp{index}.yaml").write_text(META + FIXTURE_TRAINER + f"    overrides: {{train_iters: {index + 5}}}\n")
    (folder / "more" / "refused.yaml").write_text(META + FIXTURE_TRAINER + "    overrides: {lr: -1.0}\n")
    (folder / "more" / "no_experiment.yaml").write_text("a: 1\n")
    seen = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        result = primus("task=import", f"task.source={folder}", f"task.primus_root={tree}", f"task.out={out}",
                        f"task.workers={workers}", cwd=tmp_path, timeout=120)
        written = {path.relative_to(out).as_posix(): path.read_text().replace(str(out), "OUT")
                   for path in sorted(out.rglob("*")) if path.is_file() and path.name != ".primus_import.json"}
        written["ledger"] = {name: entry["source"]  # its digests are of texts that name `out`
                             for name, entry in json.loads((out / ".primus_import.json").read_text())["files"].items()}
        seen[workers] = (result.returncode, result.stdout.replace(str(out), "OUT"),
                         result.stderr.replace(str(out), "OUT"), written)
    assert seen[1] == seen[2]
    code, stdout, stderr, written = seen[1]
    assert code == 2 and stderr.strip() == "error: 1 of 6 file(s) not imported; 1 set apart (no LLM experiment: what " \
                                           "each is, above)"
    assert "the imported experiment does not compose: module.lr=-1.0: must be > 0" in stdout
    assert sorted(name for name in written if name.startswith("experiment/")) == [f"experiment/exp{i}.yaml"
                                                                                   for i in range(4)]


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_bad_number_of_workers_is_one_line(tree, tmp_path, value):
    result = primus("task=import", f"task.source={tmp_path}", f"task.primus_root={tree}", f"task.out={tmp_path / 'o'}",
                    f"task.workers={value}", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: task.workers={value}: at least 1 (null: one per CPU core)"


@pytest.mark.parametrize("name", ["a,b", "x=1", "two words", "it's"])
def test_the_printed_run_command_runs_whatever_the_experiment_is_called(tree, tmp_path, name):
    path = tmp_path / "src" / f"{name}.yaml"
    path.parent.mkdir()
    path.write_text(META + TRAINER)
    result = primus("task=import", f"task.source={hydra_value(str(path))}", f"task.primus_root={tree}",
                    f"task.out={hydra_value(str(tmp_path / 'o u t'))}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    command = result.stdout.splitlines()[-1].removeprefix("run it: ")
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "primus_hydra"]
    ran = subprocess.run([sys.executable, *argv[1:], "task.dry_run=true", f"hydra.run.dir={tmp_path / 'run'}"],
                         cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=240)
    assert ran.returncode == 0, ran.stderr
    assert yaml.safe_load((tmp_path / "run" / "backend_args.yaml").read_text())["train_iters"] == 5


def test_a_smuggled_hydra_callback_never_runs(tree, tmp_path):
    marker = tmp_path / "ran"
    meta = yaml.safe_load(META)
    meta["work_group"] = f"x\nhydra:\n  callbacks:\n    x:\n      _target_: builtins.open\n      file: {marker}\n" \
                         f"      mode: w\n"
    meta[f"y\nhydra:\n  callbacks:\n    y:\n      _target_: os.makedirs\n      name: {marker}\n"] = 1
    path = tmp_path / "smuggled.yaml"
    path.write_text(yaml.safe_dump(meta) + TRAINER)
    imported = primus("task=import", f"task.source={path}", f"task.primus_root={tree}", f"task.out={tmp_path / 'out'}",
                      cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    ran = primus("--config-dir", str(tmp_path / "out"), "experiment=smuggled", "task.dry_run=true",
                 f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert not marker.exists()
