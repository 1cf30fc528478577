"""Megatron-Bridge trainers. Loading the recipe, applying the translated sections and calling Bridge's
pretrain/finetune entry points is a later issue."""
from __future__ import annotations

from primus_hydra.backends.external import PendingIntegrationTrainer


class MegatronBridgePretrainTrainer(PendingIntegrationTrainer):
    backend = "megatron_bridge"
    library = "Megatron-Bridge"


class MegatronBridgeSFTTrainer(PendingIntegrationTrainer):
    backend = "megatron_bridge"
    library = "Megatron-Bridge (fine-tuning)"
