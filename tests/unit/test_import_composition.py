"""task=import's check composes an imported experiment as the composed config of its group choices with its values
merged (tasks/import_composition.py): node for node what Hydra composes for `experiment=<name>`, for the imported
experiments of every framework; a file of another shape is composed whole."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.compose import nodes
from helpers.primus_tree import write_primus_tree
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.tasks.import_composition import _imported_overrides, composed_from_choices, composition_failure
from primus_hydra.tasks.import_session import import_files


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, list[str]]:
    tree = write_primus_tree(tmp_path_factory.mktemp("primus"))
    out = tmp_path_factory.mktemp("out")
    results = import_files(sorted((tree / "examples").rglob("*.yaml")), tree / "examples", tree, out, {})
    return out, [result.name for result in results if not result.failure]


def whole(name: str, config_dir: Path):
    return compose_job_config(find_conf_dir(), "config", _imported_overrides(name, config_dir))


def test_every_imported_experiment_is_what_a_whole_composition_gives(imported):
    out, names = imported
    assert len(names) >= 6 and {name.split("/")[0] for name in names} >= {"megatron", "torchtitan", "maxtext",
                                                                         "megatron_bridge"}
    for name in names:
        fast, hydras = composed_from_choices(name, out), whole(name, out)
        assert fast is not None and hydras is not None, name
        assert OmegaConf.to_yaml(fast) == OmegaConf.to_yaml(hydras), name
        assert nodes(fast) == nodes(hydras), name


def test_a_second_experiment_of_the_same_choices_is_its_own(imported):
    out, names = imported
    name = names[0]
    first = composed_from_choices(name, out)
    first.module.train_iters = 123456  # a copy of the kept config of its choices: changing it changes nothing else
    assert composed_from_choices(name, out).module.train_iters != 123456


@pytest.mark.parametrize("text", [
    "# @package _global_\nhydra:\n  job:\n    name: x\n",
    "# @package _global_\ndefaults:\n  - override /task: plan\n",
    "# @package _global_\ndefaults:\n  - /model: llama_tiny\n",
    "defaults:\n  - override /backend: megatron\n",  # no global package: Hydra puts it under experiment.*
    "# @package _global_\nmodel:\n  from_hf: /nowhere\n",
    "# @package _global_\nmodule:\n  not_a_key: 1\n",
])
def test_another_shape_is_composed_whole(tmp_path, text):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "other.yaml").write_text(text)
    assert composed_from_choices("other", tmp_path) is None


def test_a_generated_model_is_read_from_the_config_dir_it_is_composed_from(imported, tmp_path):
    out, names = imported
    for name in names:
        text = (out / "experiment" / f"{name}.yaml").read_text()
        if "override /model: odd_llama" in text or "_primus" in text:
            break
    else:
        pytest.fail("no experiment on a generated model")
    choice = next(line.split(":", 1)[1].strip() for line in text.splitlines() if "override /model:" in line)
    composed = composed_from_choices(name, out)
    copy_dir = tmp_path / "copy"
    (copy_dir / "experiment" / name).parent.mkdir(parents=True)
    (copy_dir / "experiment" / f"{name}.yaml").write_text(text)
    model = (out / "model" / f"{choice}.yaml").read_text()
    (copy_dir / "model").mkdir()
    (copy_dir / "model" / f"{choice}.yaml").write_text(model.replace(f"num_layers: {composed.model.num_layers}",
                                                                     f"num_layers: {composed.model.num_layers + 2}"))
    assert composed_from_choices(name, copy_dir).model.num_layers == composed.model.num_layers + 2


def _with(*dotlist: str):
    """A body changer: the text's values with `dotlist` merged over them."""
    return lambda text: OmegaConf.to_yaml(OmegaConf.merge(OmegaConf.create(text), OmegaConf.from_dotlist(list(dotlist))))


def _renamed_copy(out: Path, name: str, new_name: str, body=lambda text: text) -> str:
    """experiment=<new_name>: <name>'s file under another name, with other first comments (as Primus's examples repeat
    one another's values), its text after them changed by `body`."""
    text = (out / "experiment" / f"{name}.yaml").read_text()
    start = text.index("\ndefaults:") + 1
    (out / "experiment" / f"{new_name}.yaml").write_text(
        "# @package _global_\n# imported from elsewhere\n\n" + body(text[start:]))
    return new_name


@pytest.fixture()
def counted_prepare(monkeypatch):
    import primus_hydra.tasks.import_composition as composition

    calls = []
    monkeypatch.setattr(composition, "_checks", {})
    monkeypatch.setattr(composition, "prepare", lambda cfg, **kwargs: calls.append(cfg) or prepare(cfg, **kwargs))
    return calls


def test_a_repeat_of_an_experiments_values_is_answered_by_its_check(imported, counted_prepare):
    out, names = imported
    name = names[0]
    assert composition_failure(name, out) is None and len(counted_prepare) == 1
    repeat = _renamed_copy(out, name, "repeat_of_first")
    assert composition_failure(repeat, out) is None and len(counted_prepare) == 1  # the same values: not checked again
    other = _renamed_copy(out, name, "other_values", _with("module.train_iters=7"))
    assert composition_failure(other, out) is None and len(counted_prepare) == 2


def test_a_repeat_under_another_environment_is_checked_again(imported, counted_prepare, monkeypatch):
    out, names = imported
    name = next(name for name in names if "oc.env:" in (out / "experiment" / f"{name}.yaml").read_text())
    assert composition_failure(name, out) is None and len(counted_prepare) == 1
    variable = (out / "experiment" / f"{name}.yaml").read_text().split("oc.env:", 1)[1].split(",", 1)[0].rstrip("}")
    monkeypatch.setenv(variable, "not a value any key takes")  # what the experiment reads: now another answer
    assert composition_failure(name, out) is not None and len(counted_prepare) == 2
    monkeypatch.delenv(variable)
    assert composition_failure(name, out) is None and len(counted_prepare) == 2  # as at first: the kept answer


def test_a_repeat_of_a_failing_experiment_gets_its_line(imported, counted_prepare):
    out, names = imported
    bad = _renamed_copy(out, names[0], "bad_batch", _with("module.micro_batch_size=3", "module.global_batch_size=7"))
    failure = composition_failure(bad, out)
    assert failure and "global_batch_size" in failure
    assert composition_failure(_renamed_copy(out, bad, "bad_batch_again"), out) == failure
    assert len(counted_prepare) == 1


def test_a_changed_chosen_file_is_checked_again(imported, counted_prepare, tmp_path):
    out, names = imported
    copy_dir = tmp_path / "copy"
    shutil.copytree(out, copy_dir)
    name = next(name for name in names if "_primus\n" in (out / "experiment" / f"{name}.yaml").read_text())
    text = (copy_dir / "experiment" / f"{name}.yaml").read_text()
    choice = next(line.split(":", 1)[1].strip() for line in text.splitlines() if "override /model:" in line)
    assert composition_failure(name, copy_dir) is None and len(counted_prepare) == 1
    model = copy_dir / "model" / f"{choice}.yaml"  # the generated model it chose, edited since
    model.write_text(model.read_text() + "# edited\n")
    assert composition_failure(name, copy_dir) is None and len(counted_prepare) == 2


def test_a_file_composed_whole_is_not_kept(tmp_path, counted_prepare):
    import primus_hydra.tasks.import_composition as composition

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "whole.yaml").write_text("# @package _global_\ndefaults:\n  - override /task: plan\n")
    composition_failure("whole", tmp_path)
    composition_failure("whole", tmp_path)
    assert len(counted_prepare) == 2 and composition._checks == {}
