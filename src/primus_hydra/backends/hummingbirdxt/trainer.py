"""HummingbirdXT trainers. Putting <checkout>/train on sys.path and running its trainer is a later issue."""
from __future__ import annotations

from primus_hydra.backends.external import PendingIntegrationTrainer


class HummingbirdXTPosttrainTrainer(PendingIntegrationTrainer):
    backend = "hummingbirdxt"
    library = "HummingbirdXT"
