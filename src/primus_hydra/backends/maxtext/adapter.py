"""backend=maxtext: the canonical config as MaxText's config keys (args.py) and its rules."""
from __future__ import annotations

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.maxtext.args import build_maxtext_config

# the choices listed in MaxText's base.yml
ATTENTION_KERNELS = ("autoselected", "dot_product", "flash", "cudnn_flash_te")
REMAT_POLICIES = (
    "minimal_with_context", "minimal", "save_dot_with_context_except_mlp", "save_dot_except_mlpwi",
    "save_dot_except_mlp", "save_qkv_proj", "qkv_proj_offloaded", "custom", "minimal_offloaded", "save_out_proj", "full",
)


class MaxTextAdapter(ExternalBackendAdapter):
    name = "maxtext"
    import_name = "MaxText"
    distribution = "maxtext"
    third_party_dir = "maxtext"
    source_subdirs = ("src",)  # recent MaxText checkouts keep the package in src/MaxText
    install_hint = (
        "Install MaxText with JAX for your accelerator (pip install maxtext) or point backend.path=<dir>, "
        "$BACKEND_PATH or third_party/maxtext at a MaxText checkout."
    )
    trainer_classes = {"pretrain": "primus_hydra.backends.maxtext.trainer.MaxTextPretrainTrainer"}

    def validate(self) -> list[str]:
        failures = super().validate()
        backend = self.cfg.backend
        if backend.attention not in ATTENTION_KERNELS:
            failures.append(f"backend.attention={backend.attention}: allowed: {', '.join(ATTENTION_KERNELS)}")
        if backend.remat_policy not in REMAT_POLICIES:
            failures.append(f"backend.remat_policy={backend.remat_policy}: allowed: {', '.join(REMAT_POLICIES)}")
        return failures

    def convert_config(self) -> dict:
        return build_maxtext_config(self.cfg, self.run_dir, self.world_size)
