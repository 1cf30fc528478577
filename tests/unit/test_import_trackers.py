"""task=import maps Primus's experiment-tracker keys onto logger=: disable_wandb / disable_mlflow /
disable_tensorboard choose the option, wandb_* and mlflow_* become logger.wandb.* and logger.mlflow.*, and none of
them reaches Megatron as a passed-through argument (the megatron_lm trainer gets its --wandb-* flags from logger=)."""
from __future__ import annotations

import pytest
import yaml

from helpers.compose import compose_primus
from helpers.primus_tree import META, TRAINER, write_primus_tree
from primus_hydra.tasks.import_session import import_files


def imported_experiment(tmp_path, overrides: str) -> dict:
    text = META + TRAINER + f"    overrides: {{train_iters: 5, {overrides}}}\n"
    tree = write_primus_tree(tmp_path / "primus", {"examples/tracked.yaml": text})
    (result,) = import_files([tree / "examples" / "tracked.yaml"], tree / "examples", tree, tmp_path / "conf", {})
    assert result.experiment is not None, result.failure
    return yaml.safe_load(result.experiment.read_text())


@pytest.mark.parametrize("overrides, option, logger", [
    ("disable_wandb: false, wandb_project: llm, wandb_exp_name: run1, wandb_entity: team, disable_tensorboard: true",
     "wandb", {"wandb": {"project": "llm", "name": "run1", "entity": "team"}}),
    ("disable_wandb: true, disable_mlflow: false, mlflow_experiment_name: exp, mlflow_run_name: r, "
     "disable_tensorboard: true", "mlflow", {"mlflow": {"experiment_name": "exp", "run_name": "r"}}),
    ("wandb_project: llm, disable_mlflow: false", "many",
     {"use": ["tensorboard", "wandb", "mlflow"], "wandb": {"project": "llm"}}),
])
def test_primus_tracker_keys_become_the_logger_option_and_its_keys(tmp_path, overrides, option, logger):
    experiment = imported_experiment(tmp_path, overrides)
    assert {"override /logger": option} in experiment["defaults"]
    assert experiment["logger"] == logger
    assert not [key for key in experiment["backend"].get("extra_args", {}) if "wandb" in key or "mlflow" in key]


def test_tracker_keys_switched_off_keep_the_default_logger(tmp_path):
    experiment = imported_experiment(tmp_path, "disable_wandb: true, wandb_project: llm, disable_mlflow: true")
    assert not any("override /logger" in entry for entry in experiment["defaults"]) and "logger" not in experiment
    assert not [key for key in experiment["backend"].get("extra_args", {}) if "wandb" in key]


def test_the_imported_logger_composes(tmp_path):
    imported_experiment(tmp_path, "disable_wandb: false, wandb_project: llm, disable_tensorboard: true")
    cfg = compose_primus(f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "experiment=tracked")
    assert cfg.logger.name == "wandb" and cfg.logger.wandb.project == "llm"
