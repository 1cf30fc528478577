"""The Python API: compose a config as the command line does, and run it as the command line runs it.

    import primus_hydra
    cfg = primus_hydra.compose(["model=llama_tiny", "module.train_iters=20"])
    loss = primus_hydra.run(cfg, "outputs/tiny")

`compose` is `python -m primus_hydra <overrides> --cfg all` as an object: the same conf/ (the `primus_hydra.conf`
package), the same schemas, the `hydra` node included; it imports neither torch nor a backend. `run` is what
`python -m primus_hydra` does after composing: the task prepares the job before anything is written (the single-run
callback's preparation), then Hydra's own run_job makes the run dir, writes .hydra/, runs the job callbacks and the
task. Both raise PrimusError with the lines the command line prints after `error: `. Repeatable in one process (a
notebook): each call owns Hydra's global state for its duration and restores what was there.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
from typing import Any, Iterator, Optional, Sequence, Union

from omegaconf import DictConfig, open_dict, read_write

from primus_hydra.config.error_format import format_compose_error, is_compose_error
from primus_hydra.config.fast_composition import install as install_fast_composition
from primus_hydra.config.paths import hydra_job_dir, hydra_node_read_from
from primus_hydra.config.secrets import warn_about_literal_secrets
from primus_hydra.config.validate import validate_config
from primus_hydra.config.values import hydra_node_set_aside
from primus_hydra.distributed_env import launch_environment_failures
from primus_hydra.errors import ConfigValidationError, PrimusError
from primus_hydra.launch.external import overrides_for_external_launch

CONF_MODULE = "primus_hydra.conf"
JOB_NAME = "primus"


def compose(overrides: Sequence[str] = (), *, config_name: str = "config", validate: bool = True) -> DictConfig:
    """The config the command line composes for `overrides` (with `hydra`: what run() and the tasks read), checked
    by the rules every run is prepared against (ConfigValidationError: every failed rule, one line each; what
    depends on this machine or the world size is checked by run()). Under torchrun/srun it gets the command line's
    launch overrides too (the job's shared run dir)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    install_fast_composition()

    overrides = _override_strings(overrides)
    overrides += overrides_for_external_launch(overrides)
    warn_about_literal_secrets(overrides)
    try:
        cfg = _composed_with_kept_hydra_node(config_name, overrides)
        if cfg is None:
            with _own_global_hydra(), initialize_config_module(CONF_MODULE, job_name=JOB_NAME, version_base="1.3"):
                cfg = hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        _run_dir_as_a_value(cfg)
    except Exception as error:
        if isinstance(error, PrimusError) or not is_compose_error(error):
            raise
        raise PrimusError(format_compose_error(error)) from error
    if validate:
        with hydra_node_set_aside(cfg) as job:
            validate_config(job)
    return cfg


def _composed_with_kept_hydra_node(config_name: str, overrides: list[str]) -> Optional[DictConfig]:
    """What hydra.compose composes under initialize_config_module(CONF_MODULE, job_name=JOB_NAME), without composing
    Hydra's own config (config/run_composition.py), or None (Hydra composes). Hydra's process-wide state is left as
    initialize_config_module leaves it: the version base chosen, the task's name set."""
    from hydra import version
    from hydra.core.utils import JobRuntime, setup_globals

    from primus_hydra.backends.schemas import register_schemas
    from primus_hydra.config.run_composition import OWN_CONF_MODULE, compose_run_config

    version.setbase("1.3")
    setup_globals()  # Hydra's resolvers (${now:}, ${hydra:}), which Hydra's initialization registers
    register_schemas()
    JobRuntime.instance().set("name", JOB_NAME)
    return compose_run_config(OWN_CONF_MODULE, config_name, overrides, job_name=JOB_NAME)


class OverridesError(PrimusError, TypeError):
    """compose() was given something other than a list of override strings (a TypeError too, as Python's own)."""


def _override_strings(overrides: Any) -> list[str]:
    if isinstance(overrides, str):
        raise OverridesError(f"overrides is a list of strings, one override each: [{overrides!r}], not {overrides!r}")
    try:
        overrides = list(overrides)
    except TypeError:
        raise OverridesError(f"overrides={overrides!r}: must be a list of strings such as ['module.lr=1e-3']") from None
    for index, override in enumerate(overrides):
        if not isinstance(override, str):
            raise OverridesError(f"overrides[{index}]={override!r} ({type(override).__name__}): overrides must be "
                                 f"strings such as 'module.lr=1e-3'")
    return overrides


def _run_dir_as_a_value(cfg: DictConfig) -> None:
    """hydra.run.dir as the folder run() will use. A `${hydra:...}` in it (the default's model name) reads the config
    of a running job, which a composed config is not yet: it is resolved now against this config, the time of
    `${now:...}` included (run() runs there; compose again for a new folder)."""
    from omegaconf import OmegaConf

    typed = OmegaConf.to_container(cfg.hydra.run, resolve=False).get("dir")
    if "${hydra:" not in str(typed):
        return
    with hydra_node_read_from(cfg):
        run_dir = str(cfg.hydra.run.dir)
    with read_write(cfg.hydra):
        cfg.hydra.run.dir = run_dir


def run(cfg: DictConfig, run_dir: Union[str, os.PathLike, None] = None) -> Any:
    """Runs the task of `cfg` (from compose()) in `run_dir` (None: the config's hydra.run.dir) and returns what
    it returns: task.objective of a training run, the plan of task=plan, the projection of task=projection.
    `cfg` is not changed. A job Hydra would change into (hydra.job.chdir=true) runs in its run dir, and the working
    directory is restored after it. A job that fails raises its error (a PrimusError for the user's mistakes) and,
    when it trained nothing, leaves no run dir behind."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import JobStatus, run_job
    from hydra.types import HydraContext, RunMode

    # the run side: compose() alone never loads tasks/ or orchestrator/
    from primus_hydra.launch.run_dir_lock import RUN_DIR_LOCKS
    from primus_hydra.orchestrator.prepare import HANDOFF
    from primus_hydra.tasks import run_task
    from primus_hydra.tasks.callback import prepare_single_run, stay_in_working_dir_if_query

    if not isinstance(cfg, DictConfig) or "hydra" not in cfg:
        raise PrimusError("primus_hydra.run takes the config primus_hydra.compose returns (it has a `hydra` node); "
                          "compose it with primus_hydra.compose([...overrides])")
    failures = launch_environment_failures()
    if failures:
        raise ConfigValidationError(failures)
    config = copy.deepcopy(cfg)
    with read_write(config), open_dict(config):
        config.hydra.mode = RunMode.RUN  # as Hydra's run(): tasks tell a single run from a sweep point by it
        if run_dir is not None:
            config.hydra.run.dir = os.path.abspath(run_dir)
    stay_in_working_dir_if_query(config)
    job_dir = hydra_job_dir(config, sweep=False)
    made_here = not job_dir.exists()
    callbacks = Callbacks(config)
    config_name = config.hydra.job.config_name
    completed = False
    try:
        prepare_single_run(config)  # the prepare callback's on_run_start, raising where the callback exits
        others = _without_prepare_callback(callbacks)
        others.on_run_start(config=config, config_name=config_name)
        with _restored_logging():
            job_return = run_job(task_function=run_task, config=config, job_dir_key="hydra.run.dir",
                                 job_subdir_key=None, hydra_context=HydraContext(config_loader=None, callbacks=callbacks))
        others.on_run_end(config=config, config_name=config_name, job_return=job_return)
        if job_return.status != JobStatus.COMPLETED:  # Hydra's return_value would print "Error executing job" first
            raise job_return._return_value
        completed = True
        return job_return._return_value
    finally:  # a job its task did not take (it failed first), and the run dir, are let go
        HANDOFF.take(job_dir)
        RUN_DIR_LOCKS.release(job_dir)
        if not completed and made_here:
            _remove_if_it_holds_no_result(job_dir, str(config.hydra.job.name))


# what a job writes before its first step: a run dir that holds nothing else holds no result
BOOKKEEPING = (".hydra", ".primus", "logs", "resources.json", "config_resolved.yaml", "backend_args.yaml", "tensorboard")


def _remove_if_it_holds_no_result(job_dir, job_name: str) -> None:
    """The run dir this run made, when it holds only what a job writes before its first step (its logs, Hydra's
    records, an empty metrics file): a failed run leaves nothing. Anything else (a step's metrics, a checkpoint, a
    file of the user's task) keeps the whole folder."""
    import shutil

    from primus_hydra.tasks.objective import METRICS_FILE

    if not job_dir.is_dir():
        return
    for entry in job_dir.iterdir():
        empty_metrics = entry.name == METRICS_FILE and entry.is_file() and entry.stat().st_size == 0
        if entry.name not in (*BOOKKEEPING, f"{job_name}.log") and not empty_metrics:
            return
    shutil.rmtree(job_dir, ignore_errors=True)


def _without_prepare_callback(callbacks):
    """The run's callbacks (hydra.callbacks: a user's own too) but primus's prepare callback."""
    from hydra._internal.callbacks import Callbacks

    from primus_hydra.tasks.callback import PrepareJobCallback

    others = Callbacks()
    others.callbacks = [callback for callback in callbacks.callbacks if not isinstance(callback, PrepareJobCallback)]
    return others


@contextlib.contextmanager
def _own_global_hydra() -> Iterator[None]:
    """Hydra's global state is free for this call (a notebook's own `hydra.initialize` is set aside) and comes back
    as it was after it, whatever happens."""
    from hydra.core.global_hydra import GlobalHydra

    previous = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        yield
    finally:  # Hydra's initialize_* swap the singleton itself on exit: ask for it again
        GlobalHydra.instance().clear()
        if previous is not None:
            GlobalHydra.instance().initialize(previous)


@contextlib.contextmanager
def _restored_logging() -> Iterator[None]:
    """Hydra's job logging (the console and the run dir's primus.log) lasts for the job: the root logger's handlers
    and level come back afterwards, so the next run, or the notebook, does not write into this run's log."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
