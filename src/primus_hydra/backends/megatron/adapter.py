"""backend=megatron: the canonical config as Megatron-LM's argument namespace (args.py), its rules, and the trainer
(backend.trainer: auto | core | megatron_lm | a class path)."""
from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Optional

from primus_hydra.backends.base import BaseTrainer
from primus_hydra.backends.common.data_sources import data_source_warnings
from primus_hydra.backends.common.hf_folder import is_hf_folder
from primus_hydra.backends.common.run_dir_checks import checkpoint_load_warnings, existing_run_failures
from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.extra_args_types import extra_args_type_failures
from primus_hydra.backends.megatron.args import build_megatron_args
from primus_hydra.backends.megatron.config_fields import transformer_config_types
from primus_hydra.backends.megatron.core_config import (
    FIELD_RENAMES,
    LAYER_PATTERN_ARGS,
    quiet_library_logs,
    transformer_config,
)
from primus_hydra.backends.megatron.cpu_patches import cpu_support_failure
from primus_hydra.backends.megatron.datasets import dataset_failures
from primus_hydra.backends.megatron.megatron_lm import (
    command_line,
    is_megatron_lm_checkout,
    megatron_lm_parser,
    parse_with_megatron,
    version_failure,
)
from primus_hydra.backends.megatron.pipeline_layout import megatron_core_layout_failures, pipeline_layout_failures
from primus_hydra.backends.megatron.traits import MEGATRON_CORE_TRAITS
from primus_hydra.config.paths import checkpoint_dir_of
from primus_hydra.config.targets import load_target
from primus_hydra.errors import BackendUnavailableError, PrimusError
from primus_hydra.util.environment import restored_environment

TRAINER_NAMES = ("auto", "core", "megatron_lm")
CORE_TRAINER = "primus_hydra.backends.megatron.core_trainer.MegatronCoreTrainer"
MEGATRON_LM_TRAINER = "primus_hydra.backends.megatron.megatron_lm_trainer.MegatronLMTrainer"
# arguments the core trainer reads beyond TransformerConfig's fields (GPTModel, the optimizer, the layer spec), with
# the types Megatron-LM's parser gives them (megatron/training/arguments.py: type=int, type=float, store_true, choices)
CORE_TRAINER_ARGS = {"make_vocab_size_divisible_by": "int", "use_distributed_optimizer": "bool",
                     "transformer_impl": "Literal['local', 'transformer_engine', 'inference_optimized']",
                     "untie_embeddings_and_output_weights": "bool", "use_rope_scaling": "bool",
                     "rope_scaling_factor": "float", "rotary_seq_len_interpolation_factor": "int", "swiglu": "bool",
                     "group_query_attention": "bool"}
# what the core trainer takes beyond a field's own type (core_config.layer_pattern parses pattern strings)
CORE_TRAINER_CONVERSIONS = {key: "Union[int, List[int], str]" for key in LAYER_PATTERN_ARGS}


class MegatronAdapter(ExternalBackendAdapter):
    name = "megatron"
    import_name = "megatron.core"
    distribution = "megatron-core"
    third_party_dir = "Megatron-LM"
    install_hint = "Install it with: pip install 'primus-hydra[megatron]' (megatron-core, pinned for your Python)."
    traits = dataclasses.replace(  # its checkpoints load into backend=torch through a native copy
        MEGATRON_CORE_TRAITS, weight_converter="primus_hydra.backends.megatron.dcp_weights.write_native_copy")
    stages = ("pretrain", "sft")
    library = "megatron-core"
    trainer_classes = {"pretrain": CORE_TRAINER, "sft": CORE_TRAINER}
    reads_native_data = True  # the core trainer reads the native backend's sources (text, tokens, mock, indexed)
    reads_indexed_data = True

    @property
    def trainer_name(self) -> str:
        """core or megatron_lm: what backend.trainer picks (auto: megatron_lm when a Megatron-LM checkout is found
        and the run is not on the CPU, else core); a class path stays as given."""
        chosen = str(self.cfg.backend.trainer or "auto")
        if chosen != "auto":
            return chosen
        try:
            checkout = is_megatron_lm_checkout(self.find_backend_path())
        except BackendUnavailableError:
            checkout = False
        return "megatron_lm" if checkout and not self.on_cpu else "core"

    def env_defaults(self) -> dict[str, str]:
        """Megatron-LM's W&B writer takes its mode from the environment only: logger.wandb.mode as WANDB_MODE."""
        env = super().env_defaults()
        logger = self.cfg.get("logger")
        if self.trainer_name == "megatron_lm" and logger is not None and "wandb" in [str(s) for s in logger.use]:
            env["WANDB_MODE"] = str(logger.wandb.mode)
        return env

    def checkpoint_dir(self) -> Path:
        """Where the core trainer keeps its step folders: Megatron's `save`, that is extra_args.save when set, else
        module.checkpoint.dir (<run_dir>/checkpoints unless set)."""
        return Path(self.cfg.backend.extra_args.get("save") or checkpoint_dir_of(self.cfg, self.run_dir))

    def validate(self) -> list[str]:
        failures = super().validate()
        if self.trainer_name == "core":  # values of another type than megatron-core's, found before it fails on them
            failures += extra_args_type_failures(self.cfg.backend.extra_args, self._declared_type, failures)
            if self.run_dir is not None:  # what the core trainer would find on disk and refuse
                failures += existing_run_failures(self.cfg, self.run_dir, self.checkpoint_dir(), self.name)
        failures += self._hf_load_failures()
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
        stages = backend.virtual_stages_per_pipeline_rank
        if stages is not None and stages > 1:
            chunks = p.pp * stages
            if p.pp < 2 or model.num_layers % chunks:
                failures.append(f"backend.virtual_stages_per_pipeline_rank={stages}: needs module.parallel.pp >= 2 and "
                                f"model.num_layers={model.num_layers} divisible by pp x stages = {chunks}")
            elif self.layout.grad_accum < p.pp:
                failures.append(f"backend.virtual_stages_per_pipeline_rank={stages}: the interleaved schedule needs at "
                                f"least pp={p.pp} micro-batches per step, the layout gives {self.layout.grad_accum}; "
                                f"raise module.global_batch_size or lower module.micro_batch_size")
        elif stages is not None and stages < 1:
            failures.append(f"backend.virtual_stages_per_pipeline_rank={stages}: must be >= 1 (or null)")
        failures += pipeline_layout_failures(backend, model.num_layers, p.pp, self.layout.grad_accum)
        if model.moe.num_experts and p.tp > 1 and not p.sequence_parallel:
            failures.append(f"module.parallel.tp={p.tp} with MoE (model={model.name}): megatron-core requires sequence "
                            f"parallelism with tensor parallelism in MoE models; set module.parallel.sequence_parallel=true")
        trainer = str(backend.trainer or "auto")
        if "." not in trainer and trainer not in TRAINER_NAMES:
            failures.append(f"backend.trainer={trainer}: expected one of {', '.join(TRAINER_NAMES)} or a trainer class path")
        source = str(cfg.module.data.source)
        if self.trainer_name == "megatron_lm" and source == "tokens":
            failures.append("module.data.source=tokens: Megatron-LM's pretrain() reads indexed datasets; convert the "
                            "token file with its tools/preprocess_data.py and use module.data.source=indexed")
        if (self.trainer_name == "megatron_lm" and source == "indexed" and backend.tokenizer_type == "HuggingFaceTokenizer"
                and not backend.tokenizer_model):
            failures.append(
                "backend.tokenizer_model is required with backend.tokenizer_type=HuggingFaceTokenizer and indexed data; "
                "set it to the Hugging Face model id or path the data was tokenized with"
            )
        return failures

    def _hf_load_failures(self) -> list[str]:
        """module.checkpoint.load=<HF dir>: what the core trainer's weight table (convert.py) cannot convert; the
        folder itself is checked with the others (run_dir_checks.hf_load_failures)."""
        load, model = self.cfg.module.checkpoint.load, self.cfg.model
        if load in (None, "auto") or not is_hf_folder(Path(str(load))):
            return []
        if self.trainer_name != "core":
            return [f"module.checkpoint.load={load}: a Hugging Face folder; backend.trainer={self.trainer_name} does "
                    f"not start from one (backend.trainer=core does)"]
        if model.mla.enabled:
            return [f"module.checkpoint.load={load}: backend=megatron converts no multi-latent attention weights "
                    f"(model={model.name}); start from this folder with backend=torch or backend=torchtitan"]
        return []

    def warnings(self) -> list[str]:
        if self.trainer_name != "core":
            return []
        return checkpoint_load_warnings(self.cfg) + data_source_warnings(self.cfg)

    def training_failures(self) -> list[str]:
        failures = super().training_failures()
        if failures:
            return failures
        if self.trainer_name == "megatron_lm":
            return self._megatron_lm_checkout_failures()
        model = self.cfg.model
        has_te = importlib.util.find_spec("transformer_engine") is not None
        if model.mla.enabled and not has_te:
            failures.append(f"model={model.name}: multi-latent attention in megatron-core 0.16 needs Transformer Engine "
                            f"(its local layer spec cannot build MLA); install transformer-engine on a GPU machine")
        if self.cfg.module.parallel.cp > 1 and not has_te:
            failures.append(f"module.parallel.cp={self.cfg.module.parallel.cp}: megatron-core's context parallelism "
                            f"runs in Transformer Engine's attention only; install transformer-engine or set cp=1")
        if self.on_cpu:
            failure = cpu_support_failure(self.detect_backend_version())
            failures += [failure] if failure else []
        if self.trainer_name == "core":
            failures += dataset_failures(self.cfg) + self._unread_extra_args()
        return failures

    def library_failures(self) -> list[str]:
        """megatron-core's (or Megatron-LM's) own checks of the arguments: they import it, and torch."""
        if self.trainer_name == "megatron_lm":
            return self._megatron_lm_parser_failures()
        if self.trainer_name != "core":
            return []
        with restored_environment():  # importing megatron-core sets variables of its own
            pipeline_failures = megatron_core_layout_failures(self.arguments_after_patches())
        return pipeline_failures or self._transformer_config_failures()

    def _transformer_config_failures(self) -> list[str]:
        """megatron-core's own checks of the arguments (TransformerConfig.__post_init__), run here, before any worker
        starts: the translated arguments after the build_args patches, as the trainer will see them."""
        quiet_library_logs()
        try:
            with restored_environment():
                transformer_config(self.arguments_after_patches(), fused=False, use_cpu_initialization=True)
        except (ValueError, AssertionError, TypeError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            return [f"backend=megatron: megatron-core refuses these arguments: {reason}"]
        return []

    def _megatron_lm_checkout_failures(self) -> list[str]:
        root = self.find_backend_path()
        if not is_megatron_lm_checkout(root):
            return ["backend.trainer=megatron_lm needs a Megatron-LM checkout (with megatron/training): set "
                    "backend.path=<dir>, $BACKEND_PATH or third_party/Megatron-LM, or use backend.trainer=core"]
        version = version_failure(root, self.detect_backend_version())
        if version:
            return [version]
        if self.on_cpu:
            return ["backend.trainer=megatron_lm: Megatron-LM's pretrain() needs CUDA GPUs; on the CPU use "
                    "backend.trainer=core (megatron-core in this project's loop)"]
        return []

    def _megatron_lm_parser_failures(self) -> list[str]:
        root = self.find_backend_path()
        try:  # the checkout's own parser on the flags, here, before any GPU starts
            with restored_environment():
                parser = megatron_lm_parser(root)
            parse_with_megatron(command_line(self.arguments_after_patches(), parser), parser)
        except PrimusError as error:
            return [str(error)]
        except ImportError as error:
            return [f"backend.trainer=megatron_lm: Megatron-LM's arguments do not import from {root} ({error}); "
                    f"install its requirements (six, regex, pydantic, triton)"]
        return []

    def _unread_extra_args(self) -> list[str]:
        """An extra argument the core trainer would silently ignore (Primus's silently ignored keys): one line."""
        fields = transformer_config_types()
        if not fields:
            return []
        read = set(fields) | set(CORE_TRAINER_ARGS) | set(FIELD_RENAMES)
        return [f"backend.extra_args.{key}: backend.trainer=core reads no argument of that name (megatron-core's "
                f"TransformerConfig has no such field), so it would be ignored; use a TransformerConfig field name"
                for key in self.cfg.backend.extra_args if key not in read]

    def _declared_type(self, key: str) -> Optional[tuple[str, str]]:
        """The type the core trainer's reader declares for an extra argument (TransformerConfig's field, or
        Megatron-LM's parser for the others), and where."""
        fields, field = transformer_config_types(), FIELD_RENAMES.get(key, key)
        if key in CORE_TRAINER_CONVERSIONS:
            return CORE_TRAINER_CONVERSIONS[key], f"the core trainer's {key} (an int, a list or a layer pattern)"
        if key in CORE_TRAINER_ARGS:
            return CORE_TRAINER_ARGS[key], f"Megatron-LM's --{key.replace('_', '-')}"
        return (fields[field], f"megatron-core's TransformerConfig.{field}") if field in fields else None

    def convert_config(self) -> dict:
        return build_megatron_args(self.cfg, self.layout)

    def trainer_class(self, stage: str) -> type[BaseTrainer]:
        name = self.trainer_name
        if "." in name:
            return load_target(name, "backend.trainer")
        return load_target(MEGATRON_LM_TRAINER if name == "megatron_lm" else CORE_TRAINER, "backend.trainer")
