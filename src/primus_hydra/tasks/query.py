"""task=plan and task=projection answered from the job's config alone, without Hydra's run.

Both write nothing (no run dir, no `.hydra/`, Hydra's logging off: conf/task/plan.yaml and projection.yaml), so
Hydra's run only costs time here: its own config composed (launcher, sweeper, logging, help: ~10 of the ~25 merges),
its plugin scan, the run's machinery (~0.15 s over `import hydra` on this machine for a bare app, above the 0.10 s
budget of issue 30). A plain command line of these tasks composes the job's config as `--cfg job` does
(config/job_composition.py), prepares the job as the single-run callback would (every check, the same lines and
exit code) and runs the task on it.

Hydra's path answers instead wherever its run could differ: a flag (`-m`, `--config-dir`, ...), an override of
Hydra's config, a config whose `hydra:` sections or Hydra-group defaults are not this project's own (an experiment
that sets `hydra.job.env_set` or adds a callback), a value that reads Hydra's runtime (`${hydra:...}`),
task.calibrate (it runs real steps, in a run dir of its own), and anything job_composition cannot compose (Hydra
words the error). What a task reads of Hydra's runtime besides, the command line's overrides, is
command_line_overrides().
"""
from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

QUERY_TASKS = ("plan", "projection")  # conf/task/<name>.yaml: writes_nothing, Hydra's logging off
OWN_CONFIGS = frozenset({"config", *(f"task/{name}" for name in QUERY_TASKS)})  # whose Hydra-group entries are ours
# the `hydra:` keys this project's own config.yaml and task files set, which a query does not read (it runs in the
# current folder, under no job name)
OWN_HYDRA_KEYS = frozenset({"run", "sweep", "job", "output_subdir"})
OWN_JOB_KEYS = frozenset({"name", "chdir"})
_answering: list[str] = []  # the overrides of the query this process answers without Hydra


def command_line_overrides() -> list[str]:
    """The command line's overrides of the job's config, as Hydra records them (hydra.overrides.task)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else list(_answering)


def answered_query(args: list[str]) -> bool:
    """Runs `args` (a command line of overrides) here when it is a query Hydra's run would answer the same; False
    (nothing done) for every other command line."""
    from primus_hydra.config.job_composition import compose_job
    from primus_hydra.config.paths import find_conf_dir

    if not _names_a_query_task(args):
        return False
    composition = compose_job(find_conf_dir(), "config", args)
    if composition is None or not _hydra_parts_are_own(composition.hydra_sections, composition.hydra_entries):
        return False
    cfg = composition.cfg
    if OmegaConf.select(cfg, "task.name", default=None) not in QUERY_TASKS or cfg.task.get("calibrate", False):
        return False
    if _reads_hydras_runtime(cfg):
        return False
    _answering[:] = [word for word in args if not word.lstrip("+~").startswith(("hydra.", "hydra/"))]
    run_query(cfg)
    return True


def run_query(cfg: DictConfig) -> None:
    """The task of `cfg` (no `hydra` node) prepared as the single-run callback prepares it, then run."""
    from primus_hydra.config.error_format import stop_with, user_error_lines
    from primus_hydra.config.targets import task_class_of
    from primus_hydra.orchestrator.prepare import show_warnings
    from primus_hydra.util.environment import restored_environment

    task_class = task_class_of(cfg)
    try:
        job = task_class.prepare_job(cfg, None, handed_over=True)  # composed for this query alone: not copied
    except Exception as error:  # noqa: BLE001 - a user's error (a failed check, an interpolation) is its lines
        stop_with([f"error: {line}" for line in user_error_lines(error)], getattr(error, "exit_code", 2))
    show_warnings(job)
    with restored_environment():
        task_class(cfg, job).run()


def _names_a_query_task(args: list[str]) -> bool:
    if any(word.startswith("-") for word in args):
        return False
    return any(word.partition("=")[0] == "task" and word.partition("=")[2] in QUERY_TASKS for word in args)


def _hydra_parts_are_own(sections: dict, hydra_entries: list[tuple]) -> bool:
    if not set(sections) <= OWN_HYDRA_KEYS or not set(sections.get("job") or {}) <= OWN_JOB_KEYS:
        return False
    if (sections.get("job") or {}).get("chdir"):
        return False
    return all(entry[0] in OWN_CONFIGS for entry in hydra_entries)  # (the config that has it, ...)


def _reads_hydras_runtime(node: Any) -> bool:
    """Whether a value of the config interpolates `${hydra:...}`, which only Hydra's run can resolve (read from the
    nodes themselves, unresolved: ~0.1 ms)."""
    if isinstance(node, (DictConfig, ListConfig)):
        content = node.__dict__["_content"]
        if isinstance(content, dict):
            return any(_reads_hydras_runtime(child) for child in content.values())
        if isinstance(content, list):
            return any(_reads_hydras_runtime(child) for child in content)
        return isinstance(content, str) and "${hydra:" in content
    value = node._value()
    return isinstance(value, str) and "${hydra:" in value
