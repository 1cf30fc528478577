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
from typing import Any, Iterator, Sequence, Union

from omegaconf import DictConfig, open_dict, read_write

CONF_MODULE = "primus_hydra.conf"
JOB_NAME = "primus"


def compose(overrides: Sequence[str] = (), *, config_name: str = "config", validate: bool = True) -> DictConfig:
    """The config the command line composes for `overrides` (with `hydra`: what run() and the tasks read), checked
    by the rules every run is prepared against (ConfigValidationError: every failed rule, one line each; what
    depends on this machine or the world size is checked by run()). Under torchrun/srun it gets the command line's
    launch overrides too (the job's shared run dir)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    from primus_hydra.config.error_format import format_compose_error, is_compose_error
    from primus_hydra.config.secrets import warn_about_literal_secrets
    from primus_hydra.errors import PrimusError
    from primus_hydra.launch.external import overrides_for_external_launch

    if isinstance(overrides, str):
        raise TypeError(f"overrides is a list of strings, one override each: [{overrides!r}], not {overrides!r}")
    overrides = list(overrides)
    overrides += overrides_for_external_launch(overrides)
    warn_about_literal_secrets(overrides)
    try:
        with _own_global_hydra(), initialize_config_module(CONF_MODULE, job_name=JOB_NAME, version_base="1.3"):
            cfg = hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    except Exception as error:
        if isinstance(error, PrimusError) or not is_compose_error(error):
            raise
        raise PrimusError(format_compose_error(error)) from error
    if validate:
        from primus_hydra.config.validate import validate_config
        from primus_hydra.orchestrator.prepare import without_hydra_node

        validate_config(without_hydra_node(cfg))
    return cfg


def run(cfg: DictConfig, run_dir: Union[str, os.PathLike, None] = None) -> Any:
    """Runs the task of `cfg` (from compose()) in `run_dir` (None: the config's hydra.run.dir) and returns what
    it returns: task.objective of a training run, the plan of task=plan, the projection of task=projection.
    `cfg` is not changed. A job Hydra would change into (hydra.job.chdir=true) runs in its run dir, and the working
    directory is restored after it."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import run_job
    from hydra.types import HydraContext, RunMode

    from primus_hydra.config.paths import hydra_job_dir
    from primus_hydra.distributed_env import launch_environment_failures
    from primus_hydra.errors import ConfigValidationError, PrimusError
    from primus_hydra.launch.run_dir_lock import RUN_DIR_LOCKS
    from primus_hydra.orchestrator.prepare import HANDOFF
    from primus_hydra.tasks import run_task
    from primus_hydra.tasks.callback import prepare_single_run

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
    job_dir = hydra_job_dir(config, sweep=False)
    callbacks = Callbacks(config)
    config_name = config.hydra.job.config_name
    try:
        prepare_single_run(config)  # the prepare callback's on_run_start, raising where the callback exits
        others = _without_prepare_callback(callbacks)
        others.on_run_start(config=config, config_name=config_name)
        with _restored_logging():
            job_return = run_job(task_function=run_task, config=config, job_dir_key="hydra.run.dir",
                                 job_subdir_key=None, hydra_context=HydraContext(config_loader=None, callbacks=callbacks))
        others.on_run_end(config=config, config_name=config_name, job_return=job_return)
        return job_return.return_value  # the task's exception, raised again, when it failed
    finally:  # a job its task did not take (it failed first), and the run dir, are let go
        HANDOFF.take(job_dir)
        RUN_DIR_LOCKS.release(job_dir)


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
