"""backend=torchtitan: the canonical config as a torchtitan JobConfig (args.py), its rules, and the trainer
(torchtitan's own Trainer in this project's loop: trainer.py)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from primus_hydra.backends.architecture_support import gpt_oss_features
from primus_hydra.backends.common.data_sources import data_source_failures, data_source_warnings
from primus_hydra.backends.common.run_dir_checks import checkpoint_load_warnings, existing_run_failures
from primus_hydra.backends.external import ExternalBackendAdapter
from primus_hydra.backends.extra_args_types import dataclass_annotations, extra_args_type_failures
from primus_hydra.backends.torchtitan.args import (
    TORCHTITAN_MODEL_NAMES,
    build_torchtitan_job_config,
    llama4_expert_widths,
    llama_ffn_rounding,
)
from primus_hydra.backends.torchtitan.job_file import TOML_FILE, job_sections, parse_job_file, toml_text, write_job_file
from primus_hydra.backends.torchtitan.patches import cpu_support_failure
from primus_hydra.backends.traits import RECOMPUTE_MODES, BackendTraits
from primus_hydra.config.model_math import shared_expert_ffn_hidden_size
from primus_hydra.config.paths import checkpoint_dir_of
from primus_hydra.config.values import override_text
from primus_hydra.errors import PrimusError
from primus_hydra.patches.versions import any_version_matches

TRAINER = "primus_hydra.backends.torchtitan.trainer.TorchTitanTrainer"
SUPPORTED_VERSIONS = ("0.2.*",)
CONFIG_FUNCTION_VERSIONS = (">=0.3",)  # torchtitan's generation of Python config functions (no TOML JobConfig)
# torchtitan's llama3, qwen3 (dense, MoE), deepseek_v3, llama4, gpt_oss
TRAINED_FAMILIES = ("llama", "qwen3", "deepseek", "llama4", "gpt_oss")
JOB_CONFIG_MODULE = "torchtitan.config.job_config"  # its JobConfig dataclass: one field per section


class TorchTitanAdapter(ExternalBackendAdapter):
    name = "torchtitan"
    import_name = "torchtitan"
    distribution = "torchtitan"
    third_party_dir = "torchtitan"
    install_hint = "Install it with: pip install 'primus-hydra[torchtitan]' (torchtitan 0.2.2 and triton)."
    traits = BackendTraits(
        recompute_key="activation_checkpoint", searched_recompute=RECOMPUTE_MODES, shortens_long_warmup=True,
        weight_converter="primus_hydra.backends.torchtitan.convert.write_native_copy",
        interleaved_moe=True,  # its llama4 (adapter rules: the other models' MoE layers are not interleaved)
        gpt_oss_layers=True,  # its gpt_oss (adapter rules: that model has them all, the others none)
    )
    stages = ("pretrain",)
    library = "torchtitan"
    trainer_classes = {"pretrain": TRAINER}
    reads_native_data = True  # the trainer feeds the project's own batches into torchtitan's Trainer
    reads_indexed_data = True

    @property
    def required_modules(self) -> tuple[str, ...]:
        return ("torchtitan", "triton")  # torchtitan imports triton without declaring it

    def checkpoint_dir(self) -> Path:
        return Path(checkpoint_dir_of(self.cfg, self.run_dir))

    def validate(self) -> list[str]:
        failures = super().validate()
        # values of another type than torchtitan's JobConfig declares, found before it takes them as they are
        failures += extra_args_type_failures(self.cfg.backend.extra_args, self._declared_type, failures)
        if self.run_dir is not None:  # what the run would find on disk and refuse
            failures += existing_run_failures(self.cfg, self.run_dir, self.checkpoint_dir(), self.name)
        if self.cfg.model.family == "llama4" and self.cfg.model.moe.num_experts:  # what its translation derives
            failures += _llama4_width_failures(self.cfg.model)
        failures += _gpt_oss_failures(self.cfg.model)  # its gpt_oss's fixed architecture
        if not self.cfg.task.get("dry_run", False):  # a dry run exports any model's arguments
            failures += self._trainer_rules()
        return failures

    def _trainer_rules(self) -> list[str]:
        """What the trainer cannot build (one line each), before any worker starts."""
        failures = []
        p, model = self.cfg.module.parallel, self.cfg.model
        if model.family not in TRAINED_FAMILIES:
            failures.append(f"model={model.name}: backend=torchtitan trains the {', '.join(TRAINED_FAMILIES)} families "
                            f"(torchtitan's llama3, qwen3, deepseek_v3, llama4 and gpt_oss) in this release, not "
                            f"{model.family} (task.dry_run=true exports any model's arguments)")
        failures += self._moe_rules()
        if model.tie_embeddings and model.family == "llama":
            failures.append(f"model.tie_embeddings=true: torchtitan's llama3 has no tied embeddings (model={model.name}); "
                            f"set model.tie_embeddings=false")
        if model.qk_norm and model.family == "llama":
            failures.append(f"model.qk_norm=true: torchtitan's llama3 has no query/key norms (model={model.name}); "
                            f"set model.qk_norm=false")
        if model.family == "llama" and str(model.rope_scaling.type) not in ("none", "llama3"):
            failures.append(f"model.rope_scaling.type={model.rope_scaling.type}: torchtitan's llama3 scales rope the "
                            f"Llama-3.1 way only (model={model.name}); set model.rope_scaling.type to llama3 or none")
        if model.family == "qwen3" and str(model.rope_scaling.type) != "none":
            failures.append(f"model.rope_scaling.type={model.rope_scaling.type}: torchtitan's qwen3 has no rope "
                            f"scaling (model={model.name}); set model.rope_scaling.type=none")
        if model.qkv_bias and model.family != "gpt_oss":
            failures.append(f"model.qkv_bias=true: torchtitan's {TORCHTITAN_MODEL_NAMES.get(model.family, model.family)} "
                            f"has no attention biases (model={model.name}); set model.qkv_bias=false")
        if p.pp > 1:
            failures.append(f"module.parallel.pp={p.pp}: backend=torchtitan runs in this project's loop, which drives "
                            f"torchtitan's train_step without its pipeline schedules yet; use pp=1")
        return failures

    def _moe_rules(self) -> list[str]:
        model = self.cfg.model
        moe, failures = model.moe, []
        if model.family == "deepseek" and not model.mla.enabled:
            failures.append(f"model.mla.enabled=false: torchtitan's deepseek_v3 has latent attention only "
                            f"(model={model.name}); set model.mla.enabled=true")
        if not moe.num_experts:
            return failures
        if model.family == "llama":
            failures.append(f"model.moe.num_experts={moe.num_experts}: torchtitan's llama3 is dense (model={model.name})")
        if str(moe.router_score_function) not in ("softmax", "sigmoid"):  # torchtitan's MoEArgs.score_func
            failures.append(f"model.moe.router_score_function={moe.router_score_function}: torchtitan's MoE scores "
                            f"with softmax or sigmoid only; train this model with backend=torch")
        if model.family in ("qwen3", "llama4") and moe.first_dense_layers:
            failures.append(f"model.moe.first_dense_layers={moe.first_dense_layers}: torchtitan's "
                            f"{TORCHTITAN_MODEL_NAMES[model.family]} has no leading dense layers (model={model.name}); "
                            f"set it to 0")
        if moe.interleave_step > 1 and model.family != "llama4":
            failures.append(f"model.moe.interleave_step={moe.interleave_step}: of torchtitan's models only llama4 "
                            f"interleaves dense and MoE layers (model={model.name}, family {model.family})")
        if moe.router_enable_expert_bias and not moe.router_bias_update_rate:
            failures.append(f"model.moe.router_bias_update_rate={moe.router_bias_update_rate}: torchtitan's MoE keeps "
                            f"its expert bias only while it updates it (load_balance_coeff > 0), so the routing would "
                            f"lose model.moe.router_enable_expert_bias; set the rate > 0 (deepseek_v3's preset: 0.001)")
        shared = shared_expert_ffn_hidden_size(model)
        if moe.shared_experts and shared != moe.shared_experts * moe.ffn_hidden_size:
            failures.append(f"model.moe.shared_expert_ffn_hidden_size={shared}: torchtitan's shared experts are "
                            f"model.moe.shared_experts x model.moe.ffn_hidden_size = "
                            f"{moe.shared_experts * moe.ffn_hidden_size} wide; unset it")
        if moe.router_num_groups > 1 and moe.num_experts // moe.router_num_groups < 2:
            failures.append(f"model.moe.router_num_groups={moe.router_num_groups}: torchtitan's group-limited routing "
                            f"needs at least 2 experts per group ({moe.num_experts} experts)")
        return failures

    def warnings(self) -> list[str]:
        """torchtitan's MoE and YaRN differ from the canonical model in ways that still train."""
        model, warnings = self.cfg.model, checkpoint_load_warnings(self.cfg) + data_source_warnings(self.cfg)
        moe, scaling = model.moe, model.rope_scaling
        name = TORCHTITAN_MODEL_NAMES.get(model.family, model.family)
        if moe.num_experts and str(moe.load_balancing_type) != "none" and moe.aux_loss_coeff > 0:
            warnings.append(f"model.moe.load_balancing_type={moe.load_balancing_type}: torchtitan's MoE adds no "
                            f"auxiliary loss (aux_loss_coeff={moe.aux_loss_coeff} is not applied); it balances with "
                            f"the expert bias (model.moe.router_enable_expert_bias)")
        if moe.num_experts and moe.z_loss_coeff > 0:
            warnings.append(f"model.moe.z_loss_coeff={moe.z_loss_coeff}: torchtitan's MoE has no router z-loss")
        if moe.num_experts and moe.capacity_factor is not None:
            warnings.append(f"model.moe.capacity_factor={moe.capacity_factor}: torchtitan's MoE is dropless")
        if model.family == "deepseek" and str(scaling.type) == "yarn" \
                and self.cfg.module.seq_length <= scaling.original_max_position_embeddings:
            warnings.append(f"model.rope_scaling.type=yarn: torchtitan's {name} applies YaRN only past "
                            f"original_max_position_embeddings={scaling.original_max_position_embeddings} "
                            f"(DeepSeek's reference code), so at module.seq_length={self.cfg.module.seq_length} its "
                            f"rope and softmax scale are unscaled (backend=torch, like Hugging Face, always scales)")
        return warnings

    def training_failures(self) -> list[str]:
        failures = super().training_failures()
        if failures:
            return failures

        version = self.detect_backend_version()
        if any_version_matches(version, CONFIG_FUNCTION_VERSIONS):
            return [f"backend=torchtitan: this release's trainer drives torchtitan 0.2.x, not the installed {version}; "
                    f"install torchtitan==0.2.2, or write {version}'s config function with task.dry_run=true and run "
                    f"it with torchtitan's own entry point (its first lines say how)"]
        if not any_version_matches(version, SUPPORTED_VERSIONS):
            return [f"backend=torchtitan: torchtitan {version} is not supported by this release's trainer "
                    f"(supported: {', '.join(SUPPORTED_VERSIONS)}: its TOML JobConfig); install torchtitan==0.2.2"]
        if self.on_cpu:
            failure = cpu_support_failure(version)
            if failure:
                return [failure]
            p = self.cfg.module.parallel
            if p.cp > 1:  # found in a worker otherwise: torch has no CPU attention kernel that context parallelism shards
                return [f"module.parallel.cp={p.cp}: torchtitan's context parallelism shards GPU attention kernels "
                        f"(torch's CPU SDPA has no sharding strategy); set module.parallel.cp=1 on the CPU"]
            if p.ep > 1:  # found in a worker otherwise: "0 active drivers" from triton
                return [f"module.parallel.ep={p.ep}: torchtitan's expert parallelism permutes tokens with triton GPU "
                        f"kernels; on the CPU use ep=1 (the experts then shard with FSDP)"]
            if p.tp > 1 and self.cfg.model.family == "qwen3":  # its q/k norms hand attention DTensors (llama3: local)
                return [f"module.parallel.tp={p.tp}: torchtitan's qwen3 runs attention on tensor-parallel DTensors, and "
                        f"torch's CPU SDPA has no sharding strategy; on the CPU use tp=1 (FSDP and DDP work)"]
        return data_source_failures(self.cfg, blends=False)

    def _declared_type(self, key: str) -> Optional[tuple[str, str]]:
        """The annotation of an extra argument's JobConfig field (`training.steps`: Training.steps), read with `ast`,
        and where; model_args is not JobConfig's (the trainer applies it over the flavor's model args)."""
        classes = dataclass_annotations(JOB_CONFIG_MODULE)
        owner, *sections, field = ["JobConfig", *key.split(".")]
        for section in sections:
            owner = classes.get(owner, {}).get(section, "")
        annotation = classes.get(owner, {}).get(field)
        version = self.detect_backend_version()
        return (annotation, f"torchtitan {version}'s {owner}.{field}") if annotation is not None else None

    def library_failures(self) -> list[str]:
        return self._job_config_failures()

    def _job_config_failures(self) -> list[str]:
        """The installed torchtitan's own ConfigManager reads the job file (after the build_args patches, which move
        keys between releases' names), here, before any worker starts."""
        import tempfile
        from pathlib import Path

        root = logging.getLogger()  # torchtitan logs to the root logger: its warnings about the run dir's tokenizer
        level = root.level  # (written later, by the trainer) mean nothing here
        root.setLevel(logging.ERROR)
        with tempfile.TemporaryDirectory() as folder:
            try:
                parse_job_file(write_job_file(self.arguments_after_patches(), Path(folder) / "job.toml"))
            except PrimusError as error:
                return [str(error)]
            finally:
                root.setLevel(level)
        return []

    def convert_config(self) -> dict:
        return build_torchtitan_job_config(self.cfg, self.run_dir, self.layout)

    @property
    def job_format(self) -> str:
        """backend.job_format; auto: the installed torchtitan's generation (TOML when it is not installed)."""
        chosen = str(self.cfg.backend.job_format)
        if chosen != "auto":
            return chosen

        return "config_function" if any_version_matches(self.detect_backend_version(), CONFIG_FUNCTION_VERSIONS) \
            else "toml"

    def dry_run_files(self, backend_args: dict) -> dict[str, str]:
        if self.job_format == "config_function":
            from primus_hydra.backends.torchtitan.config_function import MODULE_NAME, render_config_function

            return {f"{MODULE_NAME}.py": render_config_function(backend_args, self.layout.world_size)}

        return {TOML_FILE: toml_text(job_sections(backend_args))}


def _llama4_width_failures(model) -> list[str]:
    """torchtitan's llama4 derives its experts' width from the dense one: with auto_scale_hidden_dim (divided among
    the top_k + shared experts a token meets) or without; a width neither gives is one line."""
    moe = model.moe
    try:
        multiple_of, multiplier = llama_ffn_rounding(model.hidden_size, model.ffn_hidden_size)
    except ValueError as error:
        return [f"{error} (torchtitan's llama4 derives it from multiple_of and ffn_dim_multiplier)"]
    widths = set(llama4_expert_widths(model.hidden_size, multiple_of, multiplier,
                                      moe.top_k + moe.shared_experts).values())
    if moe.ffn_hidden_size in widths:
        return []
    return [f"model.moe.ffn_hidden_size={moe.ffn_hidden_size}: torchtitan's llama4 derives its experts' width from "
            f"model.ffn_hidden_size={model.ffn_hidden_size}: {' or '.join(str(w) for w in sorted(widths))} "
            f"(model={model.name})"]


def _gpt_oss_failures(model) -> list[str]:
    """torchtitan's gpt_oss has every gpt-oss layer feature, fixed (sinks, biases, the window on even layers, the
    clamped SwiGLU, every layer MoE without shared experts); its other models have none. One line per difference."""
    features = gpt_oss_features(model)
    if model.family != "gpt_oss":
        return [f"model.{key}={value}: of torchtitan's models only gpt_oss has it (model={model.name}, family "
                f"{model.family})" for key, value in features]
    moe, scaling = model.moe, model.rope_scaling
    fixed = [("qkv_bias", model.qkv_bias, True), ("attention_output_bias", model.attention_output_bias, True),
             ("attention_sinks", model.attention_sinks, True), ("full_attention_every", model.full_attention_every, 2),
             ("qk_norm", model.qk_norm, False), ("tie_embeddings", model.tie_embeddings, False),
             ("mla.enabled", model.mla.enabled, False), ("moe.router_bias", moe.router_bias, True),
             ("moe.experts_bias", moe.experts_bias, True), ("moe.first_dense_layers", moe.first_dense_layers, 0),
             ("moe.interleave_step", moe.interleave_step, 1), ("moe.shared_experts", moe.shared_experts, 0),
             ("moe.score_before_experts", moe.score_before_experts, False)]
    failures = [f"model.{key}={override_text(value)}: torchtitan's gpt_oss has {override_text(wanted)} "
                f"(model={model.name})" for key, value, wanted in fixed if value != wanted]
    if not moe.num_experts:
        failures.append(f"model.moe.num_experts=0: every layer of torchtitan's gpt_oss is MoE (model={model.name})")
    for key, example in (("sliding_window", 128), ("swiglu_limit", 7.0)):  # gpt-oss's own values
        if getattr(model, key) is None:
            failures.append(f"model.{key}=null: torchtitan's gpt_oss needs one (gpt-oss: {example}; "
                            f"model={model.name})")
    if str(scaling.type) not in ("none", "yarn") or (str(scaling.type) == "yarn" and (
            scaling.mscale != 1.0 or scaling.mscale_all_dim)):
        failures.append(f"model.rope_scaling.type={scaling.type}: torchtitan's gpt_oss scales rope by YaRN with its "
                        f"own softmax factor (mscale 1, mscale_all_dim 0) or not at all (model={model.name})")
    return failures
