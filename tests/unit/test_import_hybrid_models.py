"""Primus's hybrid Megatron presets (zebra_llama_*: Mamba-2, Gated DeltaNet or Kimi Delta Attention layers beside
latent attention and MLP layers; mamba_*: pure Mamba) import onto model.hybrid.*, with the layer pattern Primus's
own allocator builds from hybrid_attention_ratio, the mixer the experiment's `spec` names, NoPE and the norm; the
dry run exports exactly Primus's values. Small fixture presets shaped like Primus's."""
from __future__ import annotations

import pytest
import yaml

from helpers.primus_tree import META, write_primus_tree
from primus_hydra.migrate.hybrid_layers import megatron_core_pattern, primus_hybrid_pattern
from primus_hydra.migrate.primus_yaml import load_experiment
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node, import_files

HYBRID_SPECS = "primus.backends.megatron.core.models.hybrid.hybrid_mamba_mla_layer_specs"
ZEBRA = """\
    extends:
      - language_model.yaml
    model_type: mamba
    num_layers: 16
    hidden_size: 256
    ffn_hidden_size: 512
    is_hybrid_model: true
    hybrid_attention_ratio: 0.25
    mamba_state_dim: 16
    mamba_head_dim: 32
    mamba_num_groups: 2
    linear_conv_kernel_dim: 4
    linear_key_head_dim: 32
    linear_value_head_dim: 32
    linear_num_key_heads: 4
    linear_num_value_heads: 8
    multi_latent_attention: true
    num_attention_heads: 8
    q_lora_rank: 64
    kv_lora_rank: 32
    qk_head_dim: 16
    qk_pos_emb_head_dim: 16
    v_head_dim: 32
    rotary_scaling_factor: 1.0
    mscale: 1.0
    mscale_all_dim: 1.0
    normalization: RMSNorm
    norm_epsilon: 1.0e-6
    untie_embeddings_and_output_weights: false
    rotary_base: 500000
    position_embedding_type: none
    max_position_embeddings: 4096
    """
MAMBA = """\
    model_type: mamba
    num_layers: 6
    hidden_size: 256
    num_attention_heads: 8
    mamba_state_dim: 16
    mamba_head_dim: 32
    mamba_num_groups: 2
    """


def experiment(model: str, spec: list[str], layers: int) -> str:
    return META + f"""\
    modules:
      pre_trainer:
        framework: megatron
        config: pre_trainer.yaml
        model: {model}
        overrides: {{train_iters: 5, seq_length: 1024, num_layers: {layers}, spec: {spec}}}
    """


def imported(tmp_path, preset: str, spec: list[str], name: str = "zebra_tiny", layers: int = 16):
    """The imported model (the generated preset with the experiment's model keys over it), and the mismatches of
    its dry run. The fixture checkout's module preset sets num_layers (Primus keeps it over the model preset's): the
    experiment overrides it."""
    example = experiment(f"{name}.yaml", spec, layers)
    tree = write_primus_tree(tmp_path / "primus", {f"primus/configs/models/megatron/{name}.yaml": preset,
                                                   "examples/megatron/hybrid-pretrain.yaml": example})
    out = tmp_path / "conf"
    (result,) = import_files([tree / "examples/megatron/hybrid-pretrain.yaml"], tree / "examples", tree, out, {})
    assert result.failure == "", result.failure
    model = yaml.safe_load((out / "model" / f"{name}_primus.yaml").read_text())
    overrides = yaml.safe_load((out / "experiment" / f"{result.name}.yaml").read_text()).get("model", {})
    model["hybrid"].update(overrides.get("hybrid", {}))
    loaded = load_experiment(result.source, tree, {})
    mismatches = dry_run_mismatches(result.name, out, "megatron", loaded.modules[0].params, tmp_path / "run",
                                    gpus_per_node(loaded))
    return model, overrides, mismatches


@pytest.mark.parametrize("spec_name, mixer", [("hybrid_stack_spec", None), ("gdn_hybrid_stack_spec", "gated_delta_net"),
                                              ("kda_hybrid_stack_spec_no_te", "kimi_delta_attention")])
def test_a_zebra_llama_preset_imports_its_pattern_and_mixer_and_exports_exactly(tmp_path, spec_name, mixer):
    model, overrides, mismatches = imported(tmp_path, ZEBRA, [HYBRID_SPECS, spec_name])
    assert model["hybrid"]["layer_pattern"] == "*-M-M-M-*-M-M-M-"  # Primus's HybridStack: 2 attention of 8 blocks
    assert {key: model["hybrid"][key] for key in ("mamba_state_dim", "linear_num_value_heads")} == {
        "mamba_state_dim": 16, "linear_num_value_heads": 8}
    assert (model["position_embedding"], model["normalization"], model["mla"]["enabled"]) == ("none", "rmsnorm", True)
    assert overrides.get("hybrid", {}).get("mixer") == mixer  # the experiment's spec picks it
    assert mismatches == []


def test_the_ratios_and_primus_layer_spec_are_read_into_the_pattern_not_passed_on(tmp_path):
    """Megatron-LM checks a pattern against non-zero ratios (megatron-core's allocate_layers counts each letter)
    and cannot import Primus's own layer specs: it gets the pattern, ratios 0 and no spec."""
    imported(tmp_path, ZEBRA, [HYBRID_SPECS, "gdn_hybrid_stack_spec"])
    args = yaml.safe_load((tmp_path / "run" / "backend_args.yaml").read_text())
    assert (args["hybrid_override_pattern"], args["hybrid_attention_ratio"], args["hybrid_mlp_ratio"]) == (
        "*-M-M-M-*-M-M-M-", 0.0, 0.0)
    assert {"spec", "model_type", "mamba_expand"} & set(args) == set()


def test_an_explicit_pattern_wins_over_the_ratio(tmp_path):
    preset = ZEBRA.rstrip(" ") + "    hybrid_override_pattern: 'M-M-*-M-M-M-*-M-'\n"
    model, _, mismatches = imported(tmp_path, preset, [HYBRID_SPECS, "gdn_hybrid_stack_spec"])
    assert model["hybrid"]["layer_pattern"] == "M-M-*-M-M-M-*-M-" and mismatches == []


def test_a_preset_that_inherits_nothing_gets_megatron_lms_defaults(tmp_path):
    """Primus's mamba_370M names its parent under `bases:`, which Primus's loader does not read: Megatron-LM's own
    defaults run (LayerNorm, learned absolute positions, tied embeddings), and megatron-core's allocator makes every
    layer a Mamba layer."""
    model, _, mismatches = imported(tmp_path, "    bases:\n      - mamba_base.yaml\n" + MAMBA,
                                    ["primus.backends.megatron.core.models.mamba.mamba_layer_specs", "mamba_stack_spec"],
                                    name="mamba_tiny", layers=6)
    assert model["hybrid"]["layer_pattern"] == "MMMMMM"
    assert (model["normalization"], model["position_embedding"], model["tie_embeddings"]) == (
        "layernorm", "learned_absolute", True)
    assert mismatches == []


def test_a_mamba_expand_megatron_core_ignores_is_refused_in_one_line(tmp_path):
    tree = write_primus_tree(tmp_path / "primus", {
        "primus/configs/models/megatron/zebra_tiny.yaml": ZEBRA.rstrip(" ") + "    mamba_expand: 3\n",
        "examples/megatron/hybrid-pretrain.yaml": experiment("zebra_tiny.yaml", [HYBRID_SPECS, "hybrid_stack_spec"], 16)})
    (result,) = import_files([tree / "examples/megatron/hybrid-pretrain.yaml"], tree / "examples", tree,
                             tmp_path / "conf", {})
    assert result.failure == "model zebra_tiny.yaml: an architecture this project's models cannot hold (mamba_expand=3)"


@pytest.mark.parametrize("layers, ratio, expected", [
    (24, 0.25, "*-M-M-M-*-M-M-M-*-M-M-M-"),  # Primus's zebra_llama_300M comment: attention at blocks 0, 4, 8
    (32, 0.0, "M-" * 16),
    (8, 0.75, "*-*-*-M-"),
])
def test_primus_hybrid_stack_allocation(layers, ratio, expected):
    assert primus_hybrid_pattern(layers, ratio) == expected


@pytest.mark.parametrize("layers, attention, mlp, expected", [
    (48, 0.0, 0.0, "M" * 48),
    (8, 0.25, 0.0, "MM*MM*MM"),
    (10, 0.2, 0.3, "MM-*M-*MM-"),
])
def test_megatron_core_allocation(layers, attention, mlp, expected):
    """The expected patterns are megatron-core 0.16.1's own _allocate_auto of the same numbers."""
    assert megatron_core_pattern(layers, attention, mlp) == expected
