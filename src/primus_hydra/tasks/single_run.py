"""A plain command line (overrides only: a run, a dry run) run as Hydra's command line runs it, on the config
config/run_composition.py composes: the job's config and Hydra's `hydra` node kept from Hydra's composition, node
for node what Hydra composes, in ~35 ms less, and without Hydra's plugin scan (~10 ms more).

From there it is Hydra's own code in Hydra's order (hydra/_internal/utils.py `_run_hydra`, Hydra.run): Hydra's
globals and task name, its logging configured from `hydra.hydra_logging`, the run's callbacks (this project's
prepare callback, a user's own), Hydra's run_job (the run dir, `.hydra/`, the job's logging, `hydra.job.env_set`,
hydra.job.chdir), the callbacks' end, and the job's error raised as Hydra raises it. Everything else goes Hydra's
whole way: any flag (`-m`, `--cfg`, `-cd`, `--info`, ...), `hydra.verbose` (Hydra's debug report needs its
loader), and whatever run_composition leaves to Hydra (a group of Hydra's, a sweep, a combination of `hydra:`
sections with no kept node, an error, which Hydra words).
"""
from __future__ import annotations

from typing import Any, Callable

from primus_hydra.config.paths import find_conf_dir

CONFIG_NAME = "config"


def ran_single_run(args: list[str], task_function: Callable[[Any], Any]) -> bool:
    """Runs `args` (a command line) as Hydra's run() would, with `task_function` (the undecorated @hydra.main
    function); False (nothing done) where Hydra's own command line must run it."""
    from hydra._internal.utils import detect_calling_file_or_module_from_task_function, detect_task_name

    from primus_hydra.config.run_composition import compose_run_config

    if any(word.startswith("-") for word in args):
        return False
    task_name = detect_task_name(*detect_calling_file_or_module_from_task_function(task_function))
    cfg = compose_run_config(find_conf_dir(), CONFIG_NAME, args, job_name=task_name, add_run_mode=True)
    if cfg is None or cfg.hydra.verbose:
        return False
    _run_as_hydra_runs(cfg, task_function, task_name)
    return True


def _run_as_hydra_runs(cfg: Any, task_function: Callable[[Any], Any], task_name: str) -> None:
    """Hydra.__init__'s globals, Hydra.compose_config's logging, then Hydra.run after its composition."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import JobRuntime, configure_log, run_job, setup_globals
    from hydra.types import HydraContext

    setup_globals()
    JobRuntime().set("name", task_name)
    configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name=CONFIG_NAME)
    job_return = run_job(hydra_context=HydraContext(config_loader=None, callbacks=callbacks),
                         task_function=task_function, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                         configure_logging=True)
    callbacks.on_run_end(config=cfg, config_name=CONFIG_NAME, job_return=job_return)
    _ = job_return.return_value  # a failed job raises its error here, as in Hydra's run
