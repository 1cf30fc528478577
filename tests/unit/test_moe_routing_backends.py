"""model.moe.router_score_function=sqrtsoftplus and model.moe.load_balancing_type=global_aux_loss in each backend:
backend=torch implements both; megatron-core's arguments carry both (0.16.1 has global_aux_loss and no sqrtsoftplus:
tests/integration/test_moe_balancing_against_megatron.py); torchtitan's MoE has no sqrtsoftplus and no balancing loss."""
from __future__ import annotations

import pytest

from primus_hydra.backends.megatron.args import moe_args
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare

VARIANTS = ("model=moe_tiny", "model.moe.router_score_function=sqrtsoftplus",
            "model.moe.load_balancing_type=global_aux_loss")


def test_backend_torch_takes_both_variants(compose_config):
    assert prepare(compose_config(*VARIANTS)).layout.world_size == 1


def test_megatron_arguments_name_both_variants(compose_config):
    args = moe_args(compose_config("backend=megatron", *VARIANTS).model)
    assert (args["moe_router_score_function"], args["moe_router_load_balancing_type"]) == \
        ("sqrtsoftplus", "global_aux_loss")


def test_torchtitan_refuses_sqrtsoftplus_in_one_line(compose_config):
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config("backend=torchtitan", *VARIANTS))
    assert "model.moe.router_score_function=sqrtsoftplus: torchtitan's MoE scores with softmax or sigmoid only; " \
           "train this model with backend=torch" in info.value.failures
