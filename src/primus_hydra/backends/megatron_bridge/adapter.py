"""backend=megatron_bridge: the canonical config as Megatron-Bridge ConfigContainer sections (args.py)."""
from __future__ import annotations

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.megatron.traits import MEGATRON_CORE_TRAITS
from primus_hydra.backends.megatron_bridge.args import build_megatron_bridge_config


class MegatronBridgeAdapter(ExternalBackendAdapter):
    name = "megatron_bridge"
    import_name = "megatron.bridge"
    distribution = "megatron-bridge"
    third_party_dir = "Megatron-Bridge"
    source_subdirs = ("src", "3rdparty/Megatron-LM")  # a checkout keeps megatron.bridge in src/, Megatron-LM vendored
    install_hint = (
        "Install Megatron-Bridge (pip install megatron-bridge) or point backend.path=<dir>, $BACKEND_PATH or "
        "third_party/Megatron-Bridge at a Megatron-Bridge checkout (with its 3rdparty/Megatron-LM)."
    )
    stages = ("pretrain", "sft")
    library = "Megatron-Bridge"
    traits = MEGATRON_CORE_TRAITS

    def convert_config(self) -> dict:
        return build_megatron_bridge_config(self.cfg, self.run_dir)
