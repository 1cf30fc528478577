"""MaxText trainers. Writing the translated config to a YAML file for MaxText's pyconfig and running its train
loop is a later issue."""
from __future__ import annotations

from primus_hydra.backends.external import PendingIntegrationTrainer


class MaxTextPretrainTrainer(PendingIntegrationTrainer):
    backend = "maxtext"
    library = "MaxText"
