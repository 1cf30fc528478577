"""task=import never loses or silently replaces what a user has in task.out (migrate/ledger.py): an edited
experiment is kept, a generated model file never changes, two sources never share an experiment name, the out dir
is never read back as a source, and a task.out that cannot be written is one line before anything is read."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from helpers.primus_tree import META, write_primus_tree
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.ledger import LEDGER_FILE, Ledger, digest
from primus_hydra.tasks.import_primus import ImportTask
from primus_hydra.tasks.import_session import import_files

ODD = """\
modules:
  pre_trainer:
    framework: megatron
    config: pre_trainer.yaml
    model: odd_llama.yaml
    overrides: {train_iters: %d}
"""


@pytest.fixture
def tree(tmp_path) -> Path:
    return write_primus_tree(tmp_path / "primus")


def source(folder: Path, name: str, iters: int = 5) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(META + ODD % iters)
    return folder / name


def run_import(tree: Path, src: Path, out) -> list:
    cfg = OmegaConf.create({"task": {"source": str(src), "primus_root": str(tree), "out": out}})
    return ImportTask(cfg).run()


def test_a_reimport_rewrites_its_own_file_and_keeps_an_edited_one(tree, tmp_path):
    src, out = source(tmp_path / "src", "exp.yaml", 5), tmp_path / "out"
    assert import_files([src], src.parent, tree, out, {})[0].failure == ""
    src.write_text(META + ODD % 6)
    assert import_files([src], src.parent, tree, out, {})[0].failure == ""  # unedited: rewritten
    written = out / "experiment" / "exp.yaml"
    assert yaml.safe_load(written.read_text())["module"]["train_iters"] == 6
    written.write_text(written.read_text().replace("train_iters: 6", "train_iters: 600"))  # the user's edit
    src.write_text(META + ODD % 7)
    result = import_files([src], src.parent, tree, out, {})[0]
    assert result.failure == f"{written} exists and is not what task=import wrote (edited since, or yours); kept, " \
                             f"not overwritten (move it, or choose another task.out)"
    assert "train_iters: 600" in written.read_text()


def test_a_generated_model_file_never_changes_once_written(tree, tmp_path):
    out = tmp_path / "out"
    first, second = source(tmp_path / "src", "a.yaml"), source(tmp_path / "src", "b.yaml")
    import_files([first, second], first.parent, tree, out, {})
    model = out / "model" / "odd_llama_primus.yaml"
    before = model.read_text()
    preset = tree / "primus" / "configs" / "models" / "megatron" / "odd_llama.yaml"
    preset.write_text(preset.read_text().replace("ffn_hidden_size: 864", "ffn_hidden_size: 1024"))
    again = import_files([first], first.parent, tree, out, {})[0]
    assert model.read_text() == before  # b.yaml's model keeps its numbers
    assert again.model.startswith("odd_llama_primus_") and again.model != "odd_llama_primus"
    assert yaml.safe_load((out / "model" / f"{again.model}.yaml").read_text())["ffn_hidden_size"] == 1024
    assert yaml.safe_load((out / "experiment" / "b.yaml").read_text())["defaults"][1] == {
        "override /model": "odd_llama_primus"}


def test_two_files_of_one_name_in_one_folder_are_not_merged_into_one_experiment(tree, tmp_path):
    folder = tmp_path / "src"
    source(folder, "exp.yaml", 5)
    source(folder, "exp.yml", 6)
    results = run_import_allowing_failure(tree, folder, tmp_path / "out")
    assert [r.failure for r in results][0] == ""
    assert results[1].failure == f"experiment=exp is already the import of {folder / 'exp.yaml'} (this run); a name " \
                                 f"holds one experiment: rename one of the two files"


def run_import_allowing_failure(tree, src, out):
    with pytest.raises(PrimusError, match="1 of 2 file"):
        run_import(tree, src, str(out))
    return import_files(sorted(src.iterdir()), src, tree, out / "again", {})


def test_a_second_source_of_the_same_name_does_not_replace_the_first(tree, tmp_path):
    out = tmp_path / "out"
    mi300 = source(tmp_path / "MI300X", "qwen.yaml", 10)
    mi355 = source(tmp_path / "MI355X", "qwen.yaml", 16)
    assert import_files([mi300], mi300.parent, tree, out, {})[0].failure == ""
    second = import_files([mi355], mi355.parent, tree, out, {})[0]
    assert second.failure.startswith(f"{out / 'experiment' / 'qwen.yaml'} holds the import of {mi300.resolve()}; "
                                     f"not replaced")
    assert yaml.safe_load((out / "experiment" / "qwen.yaml").read_text())["module"]["train_iters"] == 10


def test_an_out_dir_inside_the_source_is_never_read_back(tree, tmp_path):
    folder = tmp_path / "src"
    source(folder, "exp.yaml")
    assert len(run_import(tree, folder, str(folder / "conf"))) == 1
    assert len(run_import(tree, folder, str(folder / "conf"))) == 1  # not its own experiment/ and model/ files


@pytest.mark.parametrize("out, expected", [
    ("", "task.out is empty; give a folder to write the config dir into (task.out=primus_conf)"),
    ("{tmp}/file", "task.out={tmp}/file: exists and is not a folder"),
    ("/proc/primus_conf", "task.out=/proc/primus_conf: /proc is on the kernel's proc file system"),
])
def test_a_task_out_that_cannot_be_written_is_one_line(tree, tmp_path, out, expected):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PrimusError) as error:
        run_import(tree, source(tmp_path / "src", "exp.yaml"), out.format(tmp=tmp_path))
    assert str(error.value).startswith(expected.format(tmp=tmp_path))


def test_a_folder_where_the_experiment_file_goes_is_one_line(tree, tmp_path):
    src, out = source(tmp_path / "src", "exp.yaml"), tmp_path / "out"
    (out / "experiment" / "exp.yaml").mkdir(parents=True)
    result = import_files([src], src.parent, tree, out, {})[0]
    assert result.failure == f"{out / 'experiment' / 'exp.yaml'} exists and is not what task=import wrote (edited " \
                             f"since, or yours); kept, not overwritten (move it, or choose another task.out)"


def test_the_record_holds_each_files_last_write_in_name_order(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.write_all([("experiment/b.yaml", "b: 1\n", "/src/b.yaml", False), ("experiment/a.yaml", "a: 1\n",
                                                                                "/src/a.yaml", True)])
    ledger.write_all([("experiment/b.yaml", "b: 2\n", "/src/b2.yaml", False)])  # rewritten: its entry replaced
    record = json.loads((tmp_path / LEDGER_FILE).read_text())
    assert record["files"] == {"experiment/a.yaml": {"sha256": digest("a: 1\n"), "source": "/src/a.yaml"},
                               "experiment/b.yaml": {"sha256": digest("b: 2\n"), "source": "/src/b2.yaml"}}
    assert list(record["files"]) == sorted(record["files"])
    reread = Ledger(tmp_path)  # a later import reads it back, and saves the same text
    assert reread.state("experiment/b.yaml") == "ours" and reread.source_of("experiment/b.yaml") == "/src/b2.yaml"
    before = (tmp_path / LEDGER_FILE).read_text()
    reread.write_all([])
    assert (tmp_path / LEDGER_FILE).read_text() == before
