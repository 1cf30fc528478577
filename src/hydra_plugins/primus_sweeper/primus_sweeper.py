"""`hydra/sweeper=primus_basic` (conf/config.yaml's default): Hydra's basic sweeper, cartesian products and batches
unchanged, whose check that every point of a batch composes reuses the first point's config where Hydra's rules
allow it (primus_hydra.launch.sweep_compose). The basic sweeper composes every point twice, once to check it and
once to launch it: ~65 ms a point each time for this project's config, 20 s before a 150-point sweep starts.

Imports only what Hydra has loaded already (Hydra imports every hydra_plugins module at start-up). No
`from __future__ import annotations`: Hydra scans this module without registering it in sys.modules.
"""

from dataclasses import dataclass
from typing import Dict, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore


@dataclass
class PrimusBasicSweeperConf:
    _target_: str = "hydra_plugins.primus_sweeper.primus_sweeper.PrimusBasicSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="primus_basic", node=PrimusBasicSweeperConf,
                             provider="primus_hydra")


class PrimusBasicSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from primus_hydra.launch.sweep_compose import SweepComposer

        assert self.hydra_context is not None and self.config is not None
        composer = SweepComposer(self.hydra_context.config_loader, self.config)
        for overrides in batch:
            composer.check(overrides)
