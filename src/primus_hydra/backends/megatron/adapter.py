"""backend=megatron: the canonical config as Megatron-LM's argument namespace (args.py), its rules, and the trainer
(backend.trainer: auto | core | megatron_lm | a class path)."""
from __future__ import annotations

import importlib.util

from primus_hydra.backends.base import BaseTrainer
from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.megatron.args import build_megatron_args
from primus_hydra.backends.megatron.cpu_patches import cpu_support_failure
from primus_hydra.config.targets import load_target

TRAINER_NAMES = ("auto", "core", "megatron_lm")
CORE_TRAINER = "primus_hydra.backends.megatron.core_trainer.MegatronCoreTrainer"


class MegatronAdapter(ExternalBackendAdapter):
    name = "megatron"
    import_name = "megatron.core"
    distribution = "megatron-core"
    third_party_dir = "Megatron-LM"
    install_hint = "Install it with: pip install 'primus-hydra[megatron]' (megatron-core, pinned for your Python)."
    stages = ("pretrain", "sft")
    library = "megatron-core"
    trainer_classes = {"pretrain": CORE_TRAINER, "sft": CORE_TRAINER}
    reads_native_data = True  # the core trainer reads the native backend's batches (text, tokens, mock)

    @property
    def trainer_name(self) -> str:
        """core or megatron_lm: what backend.trainer (auto by default) picks; a class path stays as given."""
        chosen = str(self.cfg.backend.trainer or "auto")
        return "core" if chosen == "auto" else chosen

    def validate(self) -> list[str]:
        failures = super().validate()
        cfg, backend, p, model = self.cfg, self.cfg.backend, self.cfg.module.parallel, self.cfg.model
        if p.fsdp:  # Megatron's own asserts for --use-torch-fsdp2, reported before any GPU starts
            if p.pp > 1 or p.ep > 1:
                failures.append(
                    f"module.parallel.fsdp=true: Megatron's torch FSDP2 supports pp=1 and ep=1 only (pp={p.pp}, ep={p.ep})"
                )
            if model.tie_embeddings:
                failures.append(
                    "module.parallel.fsdp=true: Megatron's torch FSDP2 needs untied embeddings (model.tie_embeddings=false)"
                )
        if model.moe.num_experts and p.tp > 1 and not p.sequence_parallel:
            failures.append(f"module.parallel.tp={p.tp} with MoE (model={model.name}): megatron-core requires sequence "
                            f"parallelism with tensor parallelism in MoE models; set module.parallel.sequence_parallel=true")
        trainer = str(backend.trainer or "auto")
        if "." not in trainer and trainer not in TRAINER_NAMES:
            failures.append(f"backend.trainer={trainer}: expected one of {', '.join(TRAINER_NAMES)} or a trainer class path")
        if trainer == "megatron_lm":
            failures.append("backend.trainer=megatron_lm: Megatron-LM's pretrain() is not integrated in this release; "
                            "use backend.trainer=core (megatron-core, this project's loop)")
        mock = str(cfg.module.data.source) == "mock"
        if trainer == "megatron_lm" and not mock and backend.tokenizer_type == "HuggingFaceTokenizer" and not backend.tokenizer_model:
            failures.append(
                "backend.tokenizer_model is required with backend.tokenizer_type=HuggingFaceTokenizer and real data; "
                "set it to a Hugging Face model id or path (or use module.data.source=mock)"
            )
        return failures

    def training_failures(self) -> list[str]:
        failures = super().training_failures()
        if failures:
            return failures
        model, device = self.cfg.model, str(self.cfg.platform.device)
        if model.mla.enabled and importlib.util.find_spec("transformer_engine") is None:
            failures.append(f"model={model.name}: multi-latent attention in megatron-core 0.16 needs Transformer Engine "
                            f"(its local layer spec cannot build MLA); install transformer-engine on a GPU machine")
        if device == "cpu":
            failure = cpu_support_failure(self.detect_backend_version())
            failures += [failure] if failure else []
        return failures

    def convert_config(self) -> dict:
        return build_megatron_args(self.cfg, self.layout)

    def trainer_class(self, stage: str) -> type[BaseTrainer]:
        if "." in self.trainer_name:
            return load_target(self.trainer_name, "backend.trainer")
        return self.load_trainer_class(stage)
