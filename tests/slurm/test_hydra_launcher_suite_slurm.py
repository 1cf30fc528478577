"""hydra/launcher=primus_slurm passes Hydra's own launcher test suites on the local Slurm cluster, as Hydra's plugins
do: another Hydra app's sweep goes out as one job array whose tasks run Hydra's run_job on the nodes."""
from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from helpers.hydra_state import unspecified_version_base  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.slow

CLUSTER = ["hydra.launcher.timeout_min=5", "hydra.launcher.cpus_per_task=1"]


@pytest.mark.parametrize("launcher_name, overrides", [("primus_slurm", CLUSTER)])
class TestPrimusSlurmLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [({}, ["-m", "hydra/launcher=primus_slurm", *CLUSTER])])
class TestPrimusSlurmLauncherIntegration(IntegrationTestSuite):
    pass
