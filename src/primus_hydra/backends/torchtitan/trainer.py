"""torchtitan trainers. Building a JobConfig from the translated dict and running torchtitan.train.Trainer is a
later issue."""
from __future__ import annotations

from primus_hydra.backends.external import PendingIntegrationTrainer


class TorchTitanPretrainTrainer(PendingIntegrationTrainer):
    backend = "torchtitan"
    library = "torchtitan"
