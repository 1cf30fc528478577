"""The `primus_local` launcher: registered in Hydra's ConfigStore when Hydra scans the hydra_plugins namespace.

Hydra imports every hydra_plugins module at start-up, so this file imports only what Hydra has already loaded;
the sweep itself (composition, resource plan, processes, summary) lives in primus_hydra.launch.sweep.local.
No `from __future__ import annotations`: Hydra scans this module without registering it in sys.modules, and
dataclasses then cannot resolve string annotations.
"""

from dataclasses import dataclass
from typing import Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from primus_hydra.config.choices import Choice


class StartMethod(Choice):
    forkserver = "forkserver"  # points fork from a server that imported torch once
    spawn = "spawn"  # a fresh interpreter per point


@dataclass
class PrimusLocalLauncherConf:
    """How many points run at once comes from the resource plan and `sweep.*` in the primary config."""

    _target_: str = "hydra_plugins.primus_local_launcher.primus_local_launcher.PrimusLocalLauncher"
    stop_grace_s: float = 15.0  # after Ctrl-C/SIGTERM: seconds from SIGTERM to SIGKILL for the running points
    start_method: StartMethod = StartMethod.forkserver
    pin_cpus: bool = True  # each point on its slot's cores (sched_setaffinity); false: threads only (shared machines)


ConfigStore.instance().store(group="hydra/launcher", name="primus_local", node=PrimusLocalLauncherConf, provider="primus_hydra")


class PrimusLocalLauncher(Launcher):
    records_the_sweep = True  # the sweep dir and multirun.yaml are made once the points are prepared (launch/sweep/local.py)

    def __init__(self, stop_grace_s: float = 15.0, start_method: str = "forkserver", pin_cpus: bool = True) -> None:
        self.stop_grace_s = stop_grace_s
        self.start_method = str(start_method)
        self.pin_cpus = pin_cpus
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None
        self.memory = None  # what the batches of this sweep share (one launcher per sweep)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from primus_hydra.launch.sweep.local import LocalSweep, SweepMemory

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        if self.memory is None:
            self.memory = SweepMemory()
        sweep = LocalSweep(self.hydra_context, self.task_function, self.config, self.memory,
                           stop_grace_s=self.stop_grace_s, start_method=self.start_method, pin_cpus=self.pin_cpus)
        return sweep.run(job_overrides, initial_job_idx)
