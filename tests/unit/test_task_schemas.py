"""Each task has its own schema (config/schema_task.py, schema/task/<name>), as each backend has: a key of another
task fails at composition in one line, the tasks that run a job as task=train does have its keys too, and a job
config read back is typed by the task's schema."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from helpers.compose import CONF_DIR
from primus_hydra.backends.schemas import typed_config
from primus_hydra.config.error_format import format_compose_error
from primus_hydra.config.schema_task import TASK_SCHEMAS, TrainTaskConfig


def test_every_task_option_has_a_schema_of_its_name():
    assert set(TASK_SCHEMAS) == {path.stem for path in (CONF_DIR / "task").glob("*.yaml")}


@pytest.mark.parametrize("task", sorted(TASK_SCHEMAS))
def test_a_task_node_is_typed_by_its_options_schema(compose_config, task):
    assert OmegaConf.get_type(compose_config(f"task={task}").task) is TASK_SCHEMAS[task]


@pytest.mark.parametrize("overrides, expected", [
    (["task.search=true"], "task.search: Key 'search' not in 'TrainTaskConfig'"),
    (["task=projection", "task.dry_run=true"], "task.dry_run: Key 'dry_run' not in 'ProjectionTaskConfig'"),
    (["task=status", "task.suite=gemm"], "task.suite: Key 'suite' not in 'StatusTaskConfig'"),
    (["task=plan", "task.runs=outputs"], "task.runs: Key 'runs' not in 'TaskConfig'"),
])
def test_a_key_of_another_task_fails_at_composition_in_one_line(compose_config, overrides, expected):
    with pytest.raises(Exception) as info:
        compose_config(*overrides)
    assert format_compose_error(info.value) == expected


@pytest.mark.parametrize("task", ["benchmark", "preflight"])
def test_the_tasks_that_run_a_job_take_trains_keys(compose_config, task):
    cfg = compose_config(f"task={task}", "task.dry_run=true", "task.objective=loss")
    assert isinstance(OmegaConf.to_object(cfg.task), TrainTaskConfig)
    assert (cfg.task.dry_run, str(cfg.task.objective)) == (True, "loss")


def test_a_job_config_read_back_is_typed_by_its_tasks_and_backends_schemas(compose_config):
    composed = compose_config("task=benchmark", "task.sizes=[64]")
    plain = OmegaConf.create(OmegaConf.to_container(composed))

    cfg = typed_config(plain)

    assert OmegaConf.get_type(cfg.task) is TASK_SCHEMAS["benchmark"]
    assert OmegaConf.get_type(cfg.backend).__name__ == "TorchBackendConfig"
    assert list(cfg.task.sizes) == [64] and "task" in plain  # the node read is left as it was
