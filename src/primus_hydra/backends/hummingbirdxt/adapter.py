"""backend=hummingbirdxt: the canonical config as HummingbirdXT arguments (args.py). Post-training only."""
from __future__ import annotations

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.hummingbirdxt.args import build_hummingbirdxt_args
from primus_hydra.backends.traits import BackendTraits


class HummingbirdXTAdapter(ExternalBackendAdapter):
    name = "hummingbirdxt"
    import_name = "hummingbirdxt"
    distribution = "hummingbirdxt"
    third_party_dir = "HummingbirdXT"
    source_subdirs = ("train",)  # HummingbirdXT's trainer modules live in <checkout>/train
    install_hint = (
        "Provide a HummingbirdXT checkout via backend.path=<dir>, $BACKEND_PATH or third_party/HummingbirdXT "
        "(its Python dependencies installed)."
    )
    stages = ("sft",)
    library = "HummingbirdXT"
    traits = BackendTraits()

    def convert_config(self) -> dict:
        return build_hummingbirdxt_args(self.cfg, self.run_dir)
