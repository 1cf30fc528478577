"""Hydra's own launcher test suites assume a process in which no app has chosen a `version_base` yet (their test
apps then chdir into the run dir). Composing primus-hydra's config (version_base="1.3") sets Hydra's process-wide
VersionBase; this fixture clears it for a suite's test and restores it after."""
from __future__ import annotations

import pytest
from hydra.version import _UNSPECIFIED_, VersionBase


@pytest.fixture(autouse=True)
def unspecified_version_base():
    base = VersionBase.instance()
    saved = base.version_base
    base.version_base = _UNSPECIFIED_
    yield
    base.version_base = saved
