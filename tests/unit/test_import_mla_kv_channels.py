"""A latent-attention (MLA) Megatron preset whose kv_channels is not its qk head size (as Primus's glm5: 128 against
192) imports with that kv_channels kept (model.head_dim), and the dry run exports exactly Primus's values."""
from __future__ import annotations

import pytest

from helpers.primus_tree import META, write_primus_tree
from primus_hydra.migrate.primus_yaml import load_experiment
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node, import_files

MLA_MOE = """\
    extends:
      - language_model.yaml
    num_layers: 4
    hidden_size: 512
    ffn_hidden_size: 1024
    num_attention_heads: 8
    multi_latent_attention: true
    qk_layernorm: true
    q_lora_rank: 128
    kv_lora_rank: 64
    qk_head_dim: 48
    qk_pos_emb_head_dim: 16
    v_head_dim: 64
    kv_channels: 32
    num_experts: 8
    moe_router_topk: 2
    moe_ffn_hidden_size: 256
    moe_shared_expert_intermediate_size: 256
    moe_layer_freq: 1
    moe_router_score_function: sigmoid
    moe_router_enable_expert_bias: true
    rotary_base: 10000
    max_position_embeddings: 4096
    """


@pytest.mark.parametrize("kv_channels", [32, 48])  # 48: the qk head size, what the translation derives anyway
def test_kv_channels_of_a_latent_attention_preset_is_exported_as_primus_sets_it(tmp_path, kv_channels):
    tree = write_primus_tree(tmp_path / "primus", {
        "primus/configs/models/megatron/mla_moe.yaml": MLA_MOE.replace("kv_channels: 32", f"kv_channels: {kv_channels}"),
        "examples/megatron/mla_moe-pretrain.yaml": META + """\
            modules:
              pre_trainer:
                framework: megatron
                config: pre_trainer.yaml
                model: mla_moe.yaml
                overrides: {train_iters: 5, num_layers: 4}
            """})
    out = tmp_path / "conf"
    (result,) = import_files([tree / "examples/megatron/mla_moe-pretrain.yaml"], tree / "examples", tree, out, {})
    assert result.failure == "", result.failure
    experiment = load_experiment(result.source, tree, {})
    module = experiment.modules[0]
    assert dry_run_mismatches(result.name, out, "megatron", module.params, tmp_path / "run",
                              gpus_per_node(experiment)) == []
