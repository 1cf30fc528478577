"""backend=megatron_bridge: the canonical config as Megatron-Bridge ConfigContainer sections (args.py)."""
from __future__ import annotations

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.megatron_bridge.args import build_megatron_bridge_config
from primus_hydra.backends.traits import RECOMPUTE_MODES, BackendTraits


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
    traits = BackendTraits(
        interleaved_pipeline=True, uneven_pipeline_stages=True, sequence_parallel_with_tp=True,
        distributed_optimizer=True, recompute_key="recompute_granularity", recompute_off="null",
        searched_recompute=RECOMPUTE_MODES, vocab_pad_multiple=128,  # make_vocab_size_divisible_by
        bf16_state_bytes=(2, 4, 12),  # bf16 weights, fp32 main gradients, fp32 master weights and two Adam moments
        bf16_gradient_reduction=True,
    )

    def convert_config(self) -> dict:
        return build_megatron_bridge_config(self.cfg, self.run_dir)
