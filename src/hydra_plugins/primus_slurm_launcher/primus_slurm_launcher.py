"""`hydra/launcher=primus_slurm`: Slurm through submitit, built on hydra-submitit-launcher 1.2.0.

Kept thin and cheap to import (Hydra imports every hydra_plugins module at start-up): the settings dataclass is
stored in the ConfigStore here; the work is in primus_hydra.launch.slurm. What it changes from 1.2.0's
SlurmLauncher: every point is composed and prepared (validated, planned, checked) on this machine before
anything is submitted, nodes run the composed config (no recomposition, no second run of the Hydra job per
rank), srun_args/python exist, a failed rank makes the Slurm job FAILED and this command exit non-zero (hydra-submitit #1928), points with the
same job shape go out as one job array, and `launch.wait=false` returns right after submission.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher


@dataclass
class PrimusSlurmLauncherConf:
    _target_: str = "hydra_plugins.primus_slurm_launcher.primus_slurm_launcher.PrimusSlurmLauncher"
    # job shape; null = derived from the job's config (launch.nnodes, launch.nproc_per_node, launch.mode)
    nodes: Optional[int] = None
    tasks_per_node: Optional[int] = None
    gpus_per_node: Optional[int] = None
    cpus_per_task: Optional[int] = None
    mem_gb: Optional[int] = None
    timeout_min: int = 60  # the job's time limit, minutes (> 0; within the partition's)
    # queue
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    exclusive: bool = False
    name: str = "${hydra.job.name}"
    comment: Optional[str] = None
    additional_parameters: Dict[str, Any] = field(default_factory=dict)  # any other #SBATCH flag: {mail-type: END}
    # what runs
    setup: List[str] = field(default_factory=list)  # shell lines before srun (module load ..., source env.sh)
    srun_args: List[str] = field(default_factory=list)  # e.g. [--container-image=..., --container-mounts=...]
    python: Optional[str] = None  # interpreter on the nodes; null: this one (sys.executable)
    # submitit
    submitit_folder: Optional[str] = None  # null: <run dir or sweep dir>/.submitit/%j
    signal_delay_s: int = 120  # USR2 this long before the time limit: checkpoint and requeue (<= timeout_min * 30)
    max_num_timeout: int = 3  # requeues after a time-out (preemptions requeue without limit)
    array_parallelism: int = 256
    stderr_to_stdout: bool = False
    poll_interval_s: float = 2.0  # while waiting: how often to look at the jobs' state


ConfigStore.instance().store(group="hydra/launcher", name="primus_slurm", node=PrimusSlurmLauncherConf,
                             provider="primus_hydra")


class PrimusSlurmLauncher(BaseSubmititLauncher):
    _EXECUTOR = "slurm"
    records_the_sweep = True  # the sweep dir and multirun.yaml are made once the points are prepared (launch/slurm)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from primus_hydra.config.targets import task_class_of

        assert self.config is not None and self.hydra_context is not None
        if not hasattr(task_class_of(self.config), "prepare_job"):
            # another Hydra app's task: each point runs Hydra's run_job on its node (this object's __call__)
            from primus_hydra.launch.slurm.generic import launch_generic_sweep

            return launch_generic_sweep(self, job_overrides, initial_job_idx)
        from primus_hydra.launch.slurm.sweep import launch_slurm_sweep

        return launch_slurm_sweep(self.hydra_context, self.config, job_overrides, initial_job_idx)
