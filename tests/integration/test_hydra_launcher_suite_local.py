"""hydra/launcher=primus_local passes Hydra's own launcher test suites, as Hydra's plugins do: any Hydra app's sweep
(not only primus-hydra's) runs point by point in its own processes, with Hydra's run dirs, outputs and returns.

The launcher is chosen either way an app can: on the command line, or in the app's own defaults list (as experiment
files do) with the sweep asked for by `hydra.mode: MULTIRUN` in the config (as `-m` asks on the command line). Without either a run is a
single run for every launcher (Hydra's basic one too), and the sweep's dir and subdir do not apply."""
from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from helpers.hydra_state import unspecified_version_base  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("launcher_name, overrides", [("primus_local", []), ("primus_local", ["hydra.launcher.start_method=spawn"])])
class TestPrimusLocalLauncher(LauncherTestSuite):
    pass


LAUNCHER_IN_DEFAULTS = {"defaults": [{"override hydra/launcher": "primus_local"}, "_self_"]}


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/launcher=primus_local"]),
    ({**LAUNCHER_IN_DEFAULTS, "hydra": {"mode": "MULTIRUN"}}, []),
], ids=["command_line", "app_defaults"])
class TestPrimusLocalLauncherIntegration(IntegrationTestSuite):
    pass
