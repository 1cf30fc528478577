"""Megatron-LM trainers. Driving megatron.training.pretrain with the translated namespace is a later issue."""
from __future__ import annotations

from primus_hydra.backends.external import PendingIntegrationTrainer


class MegatronPretrainTrainer(PendingIntegrationTrainer):
    backend = "megatron"
    library = "Megatron-LM"


class MegatronSFTTrainer(PendingIntegrationTrainer):
    backend = "megatron"
    library = "Megatron-LM (SFT)"
