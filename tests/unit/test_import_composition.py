"""task=import's check composes an imported experiment as the composed config of its group choices with its values
merged (tasks/import_composition.py): node for node what Hydra composes for `experiment=<name>`, for the imported
experiments of every framework; a file of another shape is composed whole."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.compose import nodes
from helpers.primus_tree import write_primus_tree
from primus_hydra.config.job_composition import compose_job_config
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.tasks.import_composition import _imported_overrides, composed_from_choices
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
