"""backend=torch's router: the sqrtsoftplus score function (DeepSeek-V4) and the global-batch balancing loss
(megatron-core's global_aux_loss) on hand-computed inputs. tests/integration/test_moe_balancing_against_megatron.py
compares the same losses and their gradients with megatron-core's own router."""
from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from primus_hydra.backends.torch.moe import MoE, router_scores
from primus_hydra.config.schema_model import ModelConfig


def moe_layer(**moe) -> MoE:
    model = OmegaConf.structured(ModelConfig)
    model.hidden_size = 4
    for key, value in {"num_experts": 4, "top_k": 2, "ffn_hidden_size": 8, "aux_loss_coeff": 0.1, **moe}.items():
        model.moe[key] = value
    layer = MoE(model)
    torch.manual_seed(0)
    for param in layer.parameters():
        torch.nn.init.normal_(param, std=0.5)
    return layer


def test_sqrtsoftplus_is_the_square_root_of_softplus():
    logits = torch.tensor([[0.0, 2.0, -3.0, 30.0]])
    expected = [math.sqrt(math.log(2.0)), math.sqrt(math.log1p(math.exp(2.0))), math.sqrt(math.log1p(math.exp(-3.0))),
                math.sqrt(30.0)]
    assert router_scores(logits, "sqrtsoftplus")[0].tolist() == pytest.approx(expected, rel=1e-6)


def test_sqrtsoftplus_routes_to_the_largest_logits_with_renormalised_weights():
    layer = moe_layer(router_score_function="sqrtsoftplus")
    weights, indices, _ = layer._route(torch.tensor([[2.0, 0.0, -1.0, 1.0]]))
    first, second = math.sqrt(math.log1p(math.exp(2.0))), math.sqrt(math.log1p(math.exp(1.0)))
    assert indices[0].tolist() == [0, 3]
    assert weights[0].tolist() == pytest.approx([first / (first + second), second / (first + second)], rel=1e-6)


def test_global_aux_loss_of_one_micro_batch_in_one_process_is_the_batch_aux_loss():
    x = torch.randn(2, 6, 4)
    global_layer, batch_layer = moe_layer(load_balancing_type="global_aux_loss"), moe_layer()
    global_layer(x), batch_layer(x)
    assert global_layer.aux_loss.item() == pytest.approx(batch_layer.aux_loss.item(), rel=1e-6)


def test_global_aux_loss_counts_the_loads_of_the_steps_micro_batches_so_far():
    layer = moe_layer(load_balancing_type="global_aux_loss")
    first, second = torch.randn(2, 6, 4), torch.randn(2, 6, 4)
    layer(first)
    loads = [layer.step_expert_load.clone()]
    layer(second)
    loads.append(layer.step_expert_load - loads[0])
    scores = router_scores(layer.router(second.reshape(-1, 4)).float(), "softmax")
    tokens, average_load = 12, (loads[0] + loads[1]) / 2
    expected = 0.1 * 4 * (average_load / (2 * tokens) * scores.sum(0) / tokens).sum()
    assert layer.aux_loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert sorted(load.sum().item() for load in loads) == [24.0, 24.0]  # 12 tokens x top-2 each time


def test_a_new_step_starts_the_global_count_over():
    layer = moe_layer(load_balancing_type="global_aux_loss")
    x = torch.randn(2, 6, 4)
    layer(x)
    first_step = layer.aux_loss.item()
    layer(torch.randn(2, 6, 4))
    layer.train()  # the trainer's call at the start of every step
    layer(x)
    assert layer.step_micro_batches == 1 and layer.aux_loss.item() == pytest.approx(first_step, rel=1e-6)
