"""backend=megatron: the canonical config as Megatron-LM's argument namespace (args.py) and its rules."""
from __future__ import annotations

from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.megatron.args import build_megatron_args


class MegatronAdapter(ExternalBackendAdapter):
    name = "megatron"
    import_name = "megatron.training"  # the megatron-core wheel ships megatron.core only
    distribution = "megatron-core"
    third_party_dir = "Megatron-LM"
    install_hint = (
        "Install megatron-core (pip install megatron-core) and provide a Megatron-LM checkout for megatron.training "
        "via backend.path=<dir>, $BACKEND_PATH or third_party/Megatron-LM."
    )
    stages = ("pretrain", "sft")
    library = "Megatron-LM"

    def validate(self) -> list[str]:
        failures = super().validate()
        cfg, backend, p = self.cfg, self.cfg.backend, self.cfg.module.parallel
        if p.fsdp:  # Megatron's own asserts for --use-torch-fsdp2, reported before any GPU starts
            if p.pp > 1 or p.ep > 1:
                failures.append(
                    f"module.parallel.fsdp=true: Megatron's torch FSDP2 supports pp=1 and ep=1 only (pp={p.pp}, ep={p.ep})"
                )
            if cfg.model.tie_embeddings:
                failures.append(
                    "module.parallel.fsdp=true: Megatron's torch FSDP2 needs untied embeddings (model.tie_embeddings=false)"
                )
        mock = str(cfg.module.data.source) == "mock"
        if not mock and backend.tokenizer_type == "HuggingFaceTokenizer" and not backend.tokenizer_model:
            failures.append(
                "backend.tokenizer_model is required with backend.tokenizer_type=HuggingFaceTokenizer and real data; "
                "set it to a Hugging Face model id or path (or use module.data.source=mock)"
            )
        return failures

    def convert_config(self) -> dict:
        return build_megatron_args(self.cfg, self.layout)
