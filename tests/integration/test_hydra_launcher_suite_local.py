"""hydra/launcher=primus_local passes Hydra's own launcher test suites, as Hydra's plugins do: any Hydra app's sweep
(not only primus-hydra's) runs point by point in its own processes, with Hydra's run dirs, outputs and returns."""
from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from helpers.hydra_state import unspecified_version_base  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("launcher_name, overrides", [("primus_local", []), ("primus_local", ["hydra.launcher.start_method=spawn"])])
class TestPrimusLocalLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [({}, ["-m", "hydra/launcher=primus_local"])])
class TestPrimusLocalLauncherIntegration(IntegrationTestSuite):
    pass
