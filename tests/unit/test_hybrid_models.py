"""Hybrid (state-space) models, NoPE and LayerNorm in the canonical model: the one-line rules on model.hybrid.*,
the backends that refuse them, backend=megatron's dry-run arguments (megatron-core's MambaModel), the parameter
count and the projection of a small hybrid fixture (llama_tiny's sizes with a layer pattern)."""
from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from helpers.compose import run_job
from primus_hydra.backends.architecture_support import architecture_failures
from primus_hydra.backends.megatron.traits import MEGATRON_CORE_TRAITS
from primus_hydra.config import model_math
from primus_hydra.config.error_format import format_compose_error
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.config.validate import validate_config
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.projection.hardware import resolve_hardware
from primus_hydra.projection.layout import layout_from_config
from primus_hydra.projection.parameters import rank_parameters
from primus_hydra.projection.project import project

# llama_tiny (h 256, 8 heads, 4 KV heads, ffn 688, vocab 256) as four single-purpose layers; 16 Mamba heads of 32
HYBRID = ("model.hybrid.layer_pattern='M*-M'", "model.hybrid.mamba_state_dim=16", "model.hybrid.mamba_head_dim=32",
          "model.hybrid.mamba_num_groups=2")
GDN = ("model.hybrid.mixer=gated_delta_net", "model.hybrid.linear_key_head_dim=32", "model.hybrid.linear_value_head_dim=32",
       "model.hybrid.linear_num_key_heads=4", "model.hybrid.linear_num_value_heads=8")


def failures_of(compose_config, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as info:
        validate_config(compose_config(*overrides))
    return info.value.failures


def prepare_failures(compose_config, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config(*overrides))
    return info.value.failures


# -- the rules on model.hybrid.* --------------------------------------------------------------------------------
def test_a_hybrid_fixture_is_valid(compose_config):
    assert validate_config(compose_config(*HYBRID)) == []
    assert validate_config(compose_config(*HYBRID, *GDN)) == []


@pytest.mark.parametrize("overrides, expected", [
    (["model.hybrid.layer_pattern='M*XM'"],
     "model.hybrid.layer_pattern='M*XM': one letter per layer, each one of M mixer, * attention, - MLP, E MoE (not 'X')"),
    (["model.hybrid.layer_pattern='M*-'"],
     "model.hybrid.layer_pattern='M*-': has 3 letters, model.num_layers=4 needs one per layer"),
    (["model.hybrid.layer_pattern='M*-E'"],
     "model.hybrid.layer_pattern='M*-E': E layers are MoE layers, but model.moe.num_experts=0"),
    (["model.hybrid.mamba_num_groups=3"], "model.hybrid.mamba_num_groups=3: must divide the 16 Mamba heads"),
    (["model.hybrid.mamba_head_dim=0"], "model.hybrid.mamba_head_dim=0: must be >= 1"),
    (["model.hybrid.mamba_head_dim=48"],
     "model.hybrid.mamba_head_dim=48: must divide 2 x model.hidden_size=512 (or set model.hybrid.mamba_num_heads)"),
    ([*GDN, "model.hybrid.linear_num_value_heads=6"],
     "model.hybrid.linear_num_value_heads=6: must be a multiple of model.hybrid.linear_num_key_heads=4 (each key head "
     "serves whole value heads)"),
])
def test_a_bad_hybrid_value_is_one_line(compose_config, overrides, expected):
    assert failures_of(compose_config, *HYBRID, *overrides) == [expected]


def test_tensor_parallelism_must_split_whole_mamba_heads_and_groups(compose_config):
    failures = failures_of(compose_config, *HYBRID, "model.hybrid.mamba_num_heads=12", "model.hybrid.mamba_num_groups=3",
                           "module.parallel.tp=2", "launch.nproc_per_node=2")
    assert ("module.parallel.tp=2: must divide the 12 Mamba heads and model.hybrid.mamba_num_groups=3 (each TP rank "
            "holds whole heads and groups)") in failures


@pytest.mark.parametrize("override, expected", [
    ("model.hybrid.mixer=mamba3",
     "model.hybrid.mixer: Invalid value 'mamba3', expected one of [mamba2, gated_delta_net, kimi_delta_attention]"),
    ("model.normalization=batchnorm", "model.normalization: Invalid value 'batchnorm', expected one of [rmsnorm, layernorm]"),
    ("model.position_embedding=alibi", "model.position_embedding: Invalid value 'alibi', expected one of [rope, none, learned_absolute]"),
])
def test_a_choice_outside_its_options_fails_at_composition(compose_config, override, expected):
    with pytest.raises(Exception) as info:
        compose_config(override)
    assert format_compose_error(info.value) == expected


# -- the backends that refuse them ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "torchtitan", "maxtext"])
def test_other_backends_refuse_a_hybrid_model_in_one_line(compose_config, backend):
    failures = prepare_failures(compose_config, f"backend={backend}", "module.data.source=mock", *HYBRID,
                                "task.dry_run=true")
    assert (f"model.hybrid.layer_pattern=M*-M: backend={backend} builds transformers only; a hybrid (state-space) "
            f"model runs on backend=megatron or megatron_bridge (megatron-core's MambaModel)") in failures


def test_other_backends_refuse_nope_and_layernorm(compose_config):
    failures = prepare_failures(compose_config, "backend=torch", "model.position_embedding=none",
                                "model.normalization=layernorm", "task.dry_run=true")
    assert failures == [
        "model.normalization=layernorm: backend=torch builds rmsnorm only; backend=megatron and megatron_bridge build "
        "layernorm (model=llama_tiny)",
        "model.position_embedding=none: backend=torch builds rope only; backend=megatron and megatron_bridge build none "
        "(model=llama_tiny)"]


def test_a_cpu_run_of_a_hybrid_model_stops_before_launch_naming_the_gpu_kernels(compose_config):
    failures = prepare_failures(compose_config, "backend=megatron", "module.data.source=mock", *HYBRID)
    assert ("model.hybrid.mixer=mamba2 (model.hybrid.layer_pattern=M*-M): its layers need mamba_ssm and causal-conv1d "
            "(CUDA/Triton kernels), which run on GPUs only; run it on a GPU machine, or use task.dry_run=true "
            "here") in failures


def test_a_gpu_run_of_a_hybrid_model_is_sent_to_megatron_lms_pretrain_mamba(compose_config):
    model = compose_config(*HYBRID).model
    assert architecture_failures(model, "megatron", trains=True, runs_on_gpu=True, traits=MEGATRON_CORE_TRAITS) == [
        "model.hybrid.layer_pattern=M*-M: backend=megatron's trainers build GPT models; a hybrid model trains with "
        "Megatron-LM's own pretrain_mamba.py, given the arguments a dry run exports (backend_args.yaml), or with "
        "backend=megatron_bridge (Bridge's MambaModelProvider) on GPUs"]
    assert architecture_failures(model, "megatron", trains=False, runs_on_gpu=False, traits=MEGATRON_CORE_TRAITS) == []


def test_megatron_bridge_trains_a_hybrid_model_on_gpus_only(compose_config):
    model = compose_config(*HYBRID).model
    assert architecture_failures(model, "megatron_bridge", trains=True, runs_on_gpu=True,
                                 traits=MEGATRON_CORE_TRAITS) == []
    failures = prepare_failures(compose_config, "backend=megatron_bridge", "module.data.source=mock", *HYBRID)
    assert ("model.hybrid.mixer=mamba2 (model.hybrid.layer_pattern=M*-M): its layers need mamba_ssm and causal-conv1d "
            "(CUDA/Triton kernels), which run on GPUs only; run it on a GPU machine, or use task.dry_run=true "
            "here") in failures
    attention_only = compose_config(*HYBRID, "model.hybrid.layer_pattern='*-*-'").model
    assert architecture_failures(attention_only, "megatron_bridge", trains=True, runs_on_gpu=False,
                                 traits=MEGATRON_CORE_TRAITS) == [
        "model.hybrid.layer_pattern=*-*-: backend=megatron_bridge builds a hybrid model with Bridge's "
        "MambaModelProvider, whose megatron-core stack is Transformer Engine's (GPUs only); run it on a GPU machine, "
        "or use task.dry_run=true here"]


# -- backend=megatron's arguments -------------------------------------------------------------------------------
def test_megatron_dry_run_exports_mamba_model_arguments(compose_config, tmp_path):
    run_job(compose_config("backend=megatron", "task.dry_run=true", "module.data.source=mock", *HYBRID, *GDN,
                           "model.position_embedding=none", "model.normalization=layernorm"), tmp_path)
    args = yaml.safe_load((tmp_path / "backend_args.yaml").read_text())
    assert {key: args[key] for key in ("is_hybrid_model", "hybrid_override_pattern", "hybrid_attention_ratio",
                                       "hybrid_mlp_ratio", "mamba_state_dim", "mamba_head_dim", "mamba_num_groups",
                                       "mamba_num_heads", "linear_conv_kernel_dim", "linear_key_head_dim",
                                       "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
                                       "position_embedding_type", "normalization")} == {
        "is_hybrid_model": True, "hybrid_override_pattern": "M*-M", "hybrid_attention_ratio": 0.0,
        "hybrid_mlp_ratio": 0.0, "mamba_state_dim": 16, "mamba_head_dim": 32, "mamba_num_groups": 2,
        "mamba_num_heads": None, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
        "linear_num_key_heads": 4, "linear_num_value_heads": 8, "position_embedding_type": "none",
        "normalization": "LayerNorm"}


def test_megatron_bridge_dry_run_exports_the_mamba_provider_fields(compose_config, tmp_path):
    run_job(compose_config("backend=megatron_bridge", "task.dry_run=true", "module.data.source=mock", *HYBRID,
                           "model.position_embedding=none", "model.normalization=layernorm"), tmp_path)
    model = yaml.safe_load((tmp_path / "backend_args.yaml").read_text())["model"]
    assert {key: model[key] for key in ("is_hybrid_model", "hybrid_override_pattern", "hybrid_attention_ratio",
                                        "hybrid_mlp_ratio", "mamba_state_dim", "mamba_head_dim", "mamba_num_groups",
                                        "position_embedding_type", "normalization")} == {
        "is_hybrid_model": True, "hybrid_override_pattern": "M*-M", "hybrid_attention_ratio": 0.0,
        "hybrid_mlp_ratio": 0.0, "mamba_state_dim": 16, "mamba_head_dim": 32, "mamba_num_groups": 2,
        "position_embedding_type": "none", "normalization": "LayerNorm"}


def test_a_transformer_exports_no_hybrid_arguments(compose_config, tmp_path):
    run_job(compose_config("backend=megatron", "task.dry_run=true", "module.data.source=mock"), tmp_path)
    args = yaml.safe_load((tmp_path / "backend_args.yaml").read_text())
    assert "hybrid_override_pattern" not in args and "is_hybrid_model" not in args
    assert (args["position_embedding_type"], args["normalization"]) == ("rope", "RMSNorm")


# -- parameters and projection ------------------------------------------------------------------------------------
def test_the_hybrid_fixture_count_is_megatron_cores(compose_config):
    """megatron-core 0.16.1's MambaModel of this fixture holds 1,691,616 parameters (built on the meta device:
    tests/integration/test_hybrid_megatron_count.py builds it and compares every fixture)."""
    assert model_math.count_parameters(compose_config(*HYBRID).model) == 1_691_616


def test_layernorm_adds_a_bias_to_every_norm(compose_config):
    rms = model_math.count_parameters(compose_config().model)
    assert model_math.count_parameters(compose_config("model.normalization=layernorm").model) == rms + (2 * 4 + 1) * 256


def test_hybrid_attention_flops_come_from_its_attention_layers_only(compose_config):
    model = compose_config(*HYBRID).model
    attention = 6 * 1 * 1024 * 8 * (32 + 32)
    assert model_math.training_flops_per_token(model, 1024) == 6 * model_math.count_active_matmul_parameters(model) + attention


def test_one_rank_of_a_hybrid_holds_exactly_the_model(compose_config):
    model = compose_config(*HYBRID, *GDN).model
    whole = rank_parameters(model, tp=1, ep=1, layer_ids=range(4), first_stage=True, last_stage=True, pp=1, pad_multiple=1)
    assert whole.total == model_math.count_parameters(model)


def test_the_projection_of_a_hybrid_model_reports_its_memory(compose_config):
    cfg = compose_config("task=projection", "hardware=h100", "backend=megatron", *HYBRID)
    hardware = resolve_hardware(cfg.hardware, precision="bf16", threads_per_rank=1, host_memory_gib=0, ranks_per_node=1)
    projection = project(cfg, layout_from_config(cfg, 1, 1), hardware)
    assert projection.parameters == 1_691_616
    assert projection.stage.parameters.total == 1_691_616 and projection.stage.optimizer > 0


# Primus's presets (primus/configs/models/megatron/*.yaml) with the vocabulary of their tokenizer, and the size their
# comments publish ("~1.20B params (tied embeddings)", "~300M params") or their name gives, at that precision
LLAMA32_VOCAB, NEOX_VOCAB = 128256, 50277
PUBLISHED = {
    "zebra_llama_1B_gdn_pure": (dict(hidden_size=2048, num_layers=32, ffn_hidden_size=8192, vocab_size=LLAMA32_VOCAB,
                                     hybrid=dict(layer_pattern="M-" * 16, mixer="gated_delta_net",
                                                 linear_key_head_dim=64, linear_value_head_dim=64,
                                                 linear_num_key_heads=8, linear_num_value_heads=16)), 1.20e9, 1e7),
    "zebra_llama_300M_gdn_pure": (dict(hidden_size=1024, num_layers=24, ffn_hidden_size=4096, vocab_size=LLAMA32_VOCAB,
                                       hybrid=dict(layer_pattern="M-" * 12, mixer="gated_delta_net",
                                                   linear_key_head_dim=64, linear_value_head_dim=64,
                                                   linear_num_key_heads=4, linear_num_value_heads=8)), 300e6, 1e8),
    "zebra_llama_300M_kda_pure": (dict(hidden_size=1024, num_layers=24, ffn_hidden_size=4096, vocab_size=LLAMA32_VOCAB,
                                       hybrid=dict(layer_pattern="M-" * 12, mixer="kimi_delta_attention",
                                                   linear_key_head_dim=32, linear_value_head_dim=64,
                                                   linear_num_key_heads=8, linear_num_value_heads=8)), 300e6, 1e8),
    "mamba_370M": (dict(hidden_size=1024, num_layers=48, ffn_hidden_size=4096, vocab_size=NEOX_VOCAB,
                        normalization="layernorm", position_embedding="learned_absolute", max_position_embeddings=2048,
                        hybrid=dict(layer_pattern="M" * 48, mamba_state_dim=16, mamba_head_dim=64, mamba_num_groups=8)),
                   370e6, 1e7),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_primus_hybrid_preset_has_its_published_size(name):
    numbers, published, precision = PUBLISHED[name]
    base = dict(name=name, num_attention_heads=16, num_kv_heads=16, max_position_embeddings=4096, tie_embeddings=True)
    model = OmegaConf.merge(OmegaConf.structured(ModelConfig), {**base, **numbers})
    assert round(model_math.count_parameters(model) / precision) == round(published / precision)


def test_megatron_bridge_dry_runs_zebra_llama_and_refuses_to_train_its_latent_attention_stack(compose_config, tmp_path):
    from primus_hydra.backends.megatron_bridge.args import NO_HYBRID_LATENT_ATTENTION

    zebra = ("backend=megatron_bridge", "model=zebra_llama_1b", "module.data.source=mock")
    assert NO_HYBRID_LATENT_ATTENTION in prepare_failures(compose_config, *zebra)
    run_job(compose_config(*zebra, "task.dry_run=true"), tmp_path)
    model = yaml.safe_load((tmp_path / "backend_args.yaml").read_text())["model"]
    assert (model["multi_latent_attention"], model["hybrid_override_pattern"], model["normalization"]) == (
        True, "*-M-M-M-" * 4, "RMSNorm")
