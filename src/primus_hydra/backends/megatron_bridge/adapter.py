"""backend=megatron_bridge: the canonical config as Megatron-Bridge ConfigContainer sections (args.py)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from primus_hydra.backends.common.checkpoint_paths import megatron_iteration_folder
from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.megatron.traits import MEGATRON_CORE_TRAITS
from primus_hydra.backends.megatron_bridge.args import (
    NO_HYBRID_LATENT_ATTENTION,
    NO_LATENT_ATTENTION,
    build_megatron_bridge_config,
)
from primus_hydra.backends.megatron_bridge.cpu_patches import (
    CPU_PATCH_VERSIONS,
    allow_import_without_transformer_engine,
    cpu_support_failure,
    quiet_bridge_imports,
)
from primus_hydra.patches.versions import any_version_matches


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
    traits = dataclasses.replace(MEGATRON_CORE_TRAITS, lora=True)  # Megatron-Bridge's PEFT
    # sft is pretrain() on the SFT batches (their loss mask), from the weights of module.checkpoint.load
    trainer_classes = {stage: "primus_hydra.backends.megatron_bridge.trainer.MegatronBridgeTrainer"
                       for stage in ("pretrain", "sft")}
    reads_native_data = True  # the trainer reads the project's batches (megatron/datasets.py), text included
    reads_indexed_data = True

    def convert_config(self) -> dict:
        return build_megatron_bridge_config(self.cfg, self.run_dir)

    def training_failures(self) -> list[str]:
        """A real run's (a dry run exports the arguments whatever they start from)."""
        failures = super().training_failures()
        load = self.cfg.module.checkpoint.load
        if self.cfg.module.peft.method and not (load and megatron_iteration_folder(Path(str(load)))):
            failures.append(f"module.peft.method={self.cfg.module.peft.method}: Megatron-Bridge's PEFT starts from a "
                            f"pretrained checkpoint in Megatron's layout (module.checkpoint.load={load}); point it at a "
                            f"backend=megatron_bridge or Megatron-LM save folder (its iter_XXXXXXX or the folder above)")
        if self.cfg.model.mla.enabled:
            hybrid = self.cfg.model.hybrid.layer_pattern is not None
            failures.append(NO_HYBRID_LATENT_ATTENTION if hybrid else NO_LATENT_ATTENTION)
        version = self.detect_backend_version()
        unsupported = cpu_support_failure(version) if self.on_cpu and version is not None else None
        if unsupported:
            failures.append(unsupported)
        return failures

    def prepare_backend(self) -> None:
        """Bridge 0.3 imports transformer_engine unguarded in its LoRA modules: where TE is absent, they are loaded
        with a stand-in first (cpu_patches.py), so that `import megatron.bridge` works on any machine."""
        if any_version_matches(self.detect_backend_version(), CPU_PATCH_VERSIONS):
            allow_import_without_transformer_engine()
        quiet_bridge_imports()
        super().prepare_backend()
