"""task=projection's formulas against hand-computed numbers: parameters per rank, byte rules, activations per
recompute setting, pipeline micro-batches in flight, collectives (docs/projection.md gives each formula)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from helpers.compose import CONF_DIR
from primus_hydra.config import model_math
from primus_hydra.config.layout import stage_layers
from primus_hydra.config.model_math import padded_vocab
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.projection import activations
from primus_hydra.projection.layout import Layout
from primus_hydra.projection.memory import stage_memory
from primus_hydra.projection.parameters import (
    attention_parameters,
    rank_parameters,
    stage_layer_ids,
)
from primus_hydra.projection.step_time import collective_seconds

GIB = 1024.0 ** 3


def preset(name: str, **changes):
    model = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(f"conf/model/{name}.yaml"))
    for key, value in changes.items():
        OmegaConf.update(model, key, value)
    return model


def layout(**changes) -> Layout:
    base = dict(backend="megatron", world=8, nproc_per_node=8, tp=1, pp=1, cp=1, ep=1, dp=8, micro_batch=1,
                grad_accum=1, precision="bf16")
    return Layout(**{**base, **changes})


# -- parameters per rank --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml")))
def test_one_rank_holds_exactly_the_model(name):
    model = preset(name)
    whole = rank_parameters(model, tp=1, ep=1, layer_ids=range(model.num_layers), first_stage=True, last_stage=True,
                            pp=1, pad_multiple=1)
    assert whole.total == model_math.count_parameters(model)


def test_dense_gqa_at_tp8_splits_matrices_pads_the_vocabulary_and_replicates_norms():
    model = preset("llama3_8b")  # h 4096, 32 heads, 8 kv heads, ffn 14336, vocab 128256, untied
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024  # q, o and k, v
    ffn = 3 * 4096 * 14336
    vocab = 129024  # 128256 up to a multiple of 128 x 8
    assert padded_vocab(128256, 8, 128) == vocab
    expected = (32 * (attention + ffn) + 2 * vocab * 4096) / 8 + 32 * 2 * 4096 + 4096
    rank = rank_parameters(model, tp=8, ep=1, layer_ids=range(32), first_stage=True, last_stage=True, pp=1,
                           pad_multiple=128)
    assert rank.total == expected and rank.expert == 0


def test_tied_embeddings_count_once_on_one_stage_and_twice_across_a_pipeline():
    model = preset("llama3.2_1b")  # tied, 16 layers, vocab 128256, h 2048
    table = 128256 * 2048
    alone = rank_parameters(model, tp=1, ep=1, layer_ids=range(16), first_stage=True, last_stage=True, pp=1, pad_multiple=1)
    first = rank_parameters(model, tp=1, ep=1, layer_ids=range(8), first_stage=True, last_stage=False, pp=2, pad_multiple=1)
    last = rank_parameters(model, tp=1, ep=1, layer_ids=range(8, 16), first_stage=False, last_stage=True, pp=2, pad_multiple=1)
    assert first.total + last.total == alone.total + table  # the last stage's own copy for the output layer
    assert last.total - first.total == 2048  # same layers and table; the last stage adds the final norm


def test_moe_with_shared_experts_splits_routed_experts_over_ep_and_keeps_the_router_everywhere():
    model = preset("deepseek_v2_lite")  # 64 experts (ffn 1408), 2 shared, first layer dense, MLA without q_lora
    h, layers = 2048, 27
    experts_per_layer = 64 * 3 * h * 1408
    rank = rank_parameters(model, tp=1, ep=8, layer_ids=range(layers), first_stage=True, last_stage=True, pp=1,
                           pad_multiple=1)
    assert rank.expert == (layers - 1) * experts_per_layer / 8
    assert rank.dense == model_math.count_parameters(model) - (layers - 1) * experts_per_layer
    router = h * 64
    tp2 = rank_parameters(model, tp=2, ep=8, layer_ids=range(layers), first_stage=True, last_stage=True, pp=1, pad_multiple=1)
    split_attention, replicated_attention = attention_parameters(model)
    shared = 3 * h * 2 * 1408
    dense_ffn = 3 * h * model.ffn_hidden_size
    expected = ((layers * split_attention + (layers - 1) * shared + dense_ffn + 2 * 102400 * h) / 2
                + layers * (replicated_attention + h) + (layers - 1) * router + h)
    assert tp2.dense == expected


def test_mla_keeps_its_down_projections_whole_under_tp():
    model = preset("deepseek_v3")  # q_lora 1536, kv_lora 512, rope 64, nope 128, v 128, 128 heads, h 7168
    split, replicated = attention_parameters(model)
    h, heads = 7168, 128
    assert replicated == h * 1536 + 1536 + h * (512 + 64) + 512 + h  # q_a, its norm, kv_a, its norm, input norm
    assert split == 1536 * heads * 192 + 512 * heads * 256 + heads * 128 * h  # q_b, kv_b, o
    matmul, other = model_math.attention_block_weights(model)
    assert split + replicated == matmul + other + h


def test_uneven_pipeline_stages():
    assert stage_layers(61, 4, first=13, last=16) == [13, 16, 16, 16]
    assert stage_layers(32, 4) == [8, 8, 8, 8]
    assert stage_layers(30, 4, first=6, last=6) == [6, 9, 9, 6]
    assert stage_layer_ids([2, 3]) == [[0, 1], [2, 3, 4]]
    with pytest.raises(ValueError):
        stage_layers(30, 4, first=7)
    with pytest.raises(ValueError):
        stage_layers(30, 1, first=7)


def test_uneven_stages_put_the_embedding_and_output_on_the_outer_stages():
    model = preset("deepseek_v3")  # 61 layers, 3 dense; first stage 13 (with the embedding), last 16 (output)
    stages = stage_layer_ids(stage_layers(61, 4, first=13, last=16))
    uneven = layout(pp=4, dp=2, ep=8, first_stage_layers=13, last_stage_layers=16, distributed_optimizer=True)
    memory = [stage_memory(model, uneven, 4096, index, ids, 0.0) for index, ids in enumerate(stages)]
    assert [m.parameters.layers for m in memory] == [13, 16, 16, 16]
    table = 129280 * 7168  # the vocabulary (a multiple of 128) times h
    first_layers = sum(rank_parameters(model, tp=1, ep=8, layer_ids=[i], first_stage=False, last_stage=False, pp=4,
                                       pad_multiple=128).total for i in stages[0])
    assert memory[0].parameters.total == first_layers + table
    last_layers = sum(rank_parameters(model, tp=1, ep=8, layer_ids=[i], first_stage=False, last_stage=False, pp=4,
                                      pad_multiple=128).total for i in stages[3])
    assert memory[3].parameters.total == last_layers + table + 7168  # output layer and final norm


# -- bytes per parameter --------------------------------------------------------------------------------------

def test_megatron_byte_rules_with_and_without_the_distributed_optimizer():
    model = preset("llama_tiny")
    n = model_math.count_parameters(model)  # vocab 256 pads to itself at tp 1 (multiple of 128)
    plain = stage_memory(model, layout(), 256, 0, list(range(4)), 0.0)
    assert (plain.weights, plain.gradients, plain.optimizer) == (2 * n, 4 * n, 12 * n)  # 18 bytes per parameter
    sharded = stage_memory(model, layout(distributed_optimizer=True), 256, 0, list(range(4)), 0.0)
    assert (sharded.weights, sharded.gradients, sharded.optimizer) == (2 * n, 4 * n, 12 * n / 8)  # 6 + 12/dp
    fp32 = stage_memory(model, layout(precision="fp32"), 256, 0, list(range(4)), 0.0)
    assert (fp32.weights, fp32.gradients, fp32.optimizer) == (4 * n, 4 * n, 8 * n)


def test_native_fsdp_shards_states_and_gathers_two_blocks_and_the_root():
    model = preset("llama_tiny")
    n = model_math.count_parameters(model)
    fsdp = stage_memory(model, layout(backend="torch", world=2, dp=2, fsdp=True, precision="fp32"), 256, 0, list(range(4)), 0.0)
    assert (fsdp.weights, fsdp.gradients, fsdp.optimizer) == (4 * n / 2, 4 * n / 2, 8 * n / 2)
    block = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256
    assert fsdp.overhead == (2 * block + 2 * 256 * 256) * 4
    ddp = stage_memory(model, layout(backend="torch", world=2, dp=2, precision="fp32"), 256, 0, list(range(4)), 0.0)
    assert ddp.overhead == 4 * n  # DDP's gradient buckets


# -- activations ----------------------------------------------------------------------------------------------

def test_megatron_activations_per_recompute_setting():
    model = preset("llama_tiny")  # h 256, q 256, k = v = 128, attention output 256, f 688, 8 heads
    tokens, seq = 512, 256
    kwargs = dict(tokens=tokens, seq=seq, tp=2, act_bytes=2, etp=2)
    # sequence parallel: everything over tp; flash: no scores
    flash = activations.megatron_layer(model, 0, sp=True, recompute="none", flash=True, **kwargs)
    assert flash == tokens * (4 * 256 + 256 + 2 * 128 + 256 + 3 * 688) / 2 * 2
    # without sequence parallelism the norm, QKV and FC1 inputs are whole on every tp rank
    no_sp = activations.megatron_layer(model, 0, sp=False, recompute="none", flash=True, **kwargs)
    assert no_sp == tokens * (4 * 256 + (256 + 2 * 128 + 256 + 3 * 688) / 2) * 2
    # an unfused attention stores the softmax output (heads x seq per token); selective recompute drops it again
    unfused = activations.megatron_layer(model, 0, sp=True, recompute="none", flash=False, **kwargs)
    assert unfused - flash == tokens * 8 * seq / 2 * 2
    assert activations.megatron_layer(model, 0, sp=True, recompute="selective", flash=False, **kwargs) == flash
    # full: the layer's input only
    assert activations.megatron_layer(model, 0, sp=True, recompute="full", flash=True, **kwargs) == tokens * 256 / 2 * 2


def test_korthikanti_gpt_layer_without_dropout():
    """GPT's widths (MHA, a 4h MLP written here as SwiGLU's 3f = two 4h-wide GeLU tensors + the FC1 input): the
    accounting gives Korthikanti's 34 sbh + 5 a s^2 b less what dropout adds there: the two 1-byte masks after
    attention and MLP (2 sbh), the scores' mask and dropped-out copy (3 a s^2 b)."""
    h, heads, seq, b = 1024, 16, 2048, 1
    model = SimpleNamespace(hidden_size=h, num_attention_heads=heads, num_kv_heads=heads, head_dim=None,
                            ffn_hidden_size=8 * h / 3, mla=SimpleNamespace(enabled=False),
                            moe=SimpleNamespace(num_experts=0))
    stored = activations.megatron_layer(model, 0, tokens=seq * b, seq=seq, tp=1, sp=False, recompute="none",
                                        flash=False, act_bytes=2, etp=1)
    assert stored == pytest.approx(seq * b * h * (34 - 2) + (5 - 3) * heads * seq * seq * b)


def test_native_activations_match_the_saved_tensors_of_the_model():
    model = preset("llama_tiny")
    per_token = 6 * 256 + 3 * 256 + 2 * 128 + 4 * 688  # residuals and norms, q/out/flat, k/v, SwiGLU
    assert activations.native_layer(model, 0, tokens=2048, tp=1, act_bytes=4) == 2048 * per_token * 4
    moe = preset("moe_tiny")  # 8 experts, top 2, expert ffn 256
    moe_token = 6 * 256 + 3 * 256 + 2 * 128 + 3 * 8 + 2 * (2 * 256 + 4 * 256)
    assert activations.native_layer(moe, 0, tokens=2048, tp=1, act_bytes=4) == 2048 * moe_token * 4


def test_micro_batches_in_flight():
    assert activations.pipeline_in_flight(layout(pp=4, grad_accum=8), 0) == 4  # 1F1B: pp - stage
    assert activations.pipeline_in_flight(layout(pp=4, grad_accum=8), 3) == 1
    assert activations.pipeline_in_flight(layout(pp=4, grad_accum=2), 0) == 2  # fewer micro-batches than stages
    assert activations.pipeline_in_flight(layout(pp=4, grad_accum=8, vpp=2), 0) == pytest.approx(4 * (1 + 3 / 8))
    assert activations.pipeline_in_flight(layout(pp=4, grad_accum=8, schedule="gpipe"), 0) == 8


# -- communication --------------------------------------------------------------------------------------------

def test_ring_collectives():
    assert collective_seconds("all_reduce", 8e9, 8, 1e9, 0.0) == pytest.approx(2 * 7 / 8 * 8)
    assert collective_seconds("all_gather", 8e9, 8, 1e9, 1e-3) == pytest.approx(7 / 8 * 8 + 7e-3)
    assert collective_seconds("all_to_all", 8e9, 4, 1e9, 0.0) == pytest.approx(3 / 4 * 8)
    assert collective_seconds("send", 1e9, 2, 1e9, 1e-3) == pytest.approx(1.001)
    assert collective_seconds("all_reduce", 8e9, 1, 1e9, 1.0) == 0.0
