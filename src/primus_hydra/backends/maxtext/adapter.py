"""backend=maxtext: the canonical config as MaxText's config keys (args.py) and its rules."""
from __future__ import annotations

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.maxtext.args import build_maxtext_config
from primus_hydra.backends.maxtext.gemma4 import gemma4_block_failures
from primus_hydra.backends.traits import BackendTraits


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
    stages = ("pretrain",)
    library = "MaxText"
    traits = BackendTraits(recompute_key="remat_policy", gemma4_layers=True)  # its gemma4 decoder block

    def validate(self) -> list[str]:
        return super().validate() + gemma4_block_failures(self.cfg.model)

    def convert_config(self) -> dict:
        return build_maxtext_config(self.cfg, self.run_dir, self.layout)
