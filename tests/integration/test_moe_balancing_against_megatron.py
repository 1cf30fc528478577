"""backend=torch's balancing losses are megatron-core's: the same router weight and micro-batches through
megatron-core's own TopKRouter (on the CPU, a gloo group per rank) and through the native MoE give the same loss per
micro-batch and the same router gradient, for aux_loss, seq_aux_loss and global_aux_loss (whose loads are summed
over the data-parallel ranks and averaged over the step's micro-batches), one process and two data-parallel ranks.
megatron-core 0.16.1 has no sqrtsoftplus: its loss is checked against megatron-core's switch_load_balancing_loss_func
on the normalised sqrt(softplus) scores, which is how Primus's DeepSeek-V4 router defines it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from helpers.cli import error_lines, primus
from helpers.compose import REPO
from helpers.curves import assert_same_curve, losses
from helpers.libraries import needs_megatron_core
from helpers.overrides import SHORT_RUN
from primus_hydra.backends.torch.moe import MoE
from primus_hydra.config.schema_model import ModelConfig

pytestmark = [pytest.mark.slow, needs_megatron_core]

EXPERTS, TOP_K, HIDDEN, COEFF = 8, 2, 16, 0.01
# the balancing types and score functions compared, each a case that every rank process runs in turn
CASES = [("aux_loss", "softmax"), ("seq_aux_loss", "softmax"), ("global_aux_loss", "softmax"),
         ("global_aux_loss", "sigmoid")]
# one rank: for each case, megatron-core's router, then the native MoE, on this rank's half (or all) of every
# micro-batch (one process for all cases: megatron-core's import is most of a process's time)
RANK = """
import sys
import torch
import torch.distributed as dist

inputs, out, rank, world, store = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)
from primus_hydra.backends.megatron import patches
from primus_hydra.backends.megatron.cpu_patches import install_cpu_support
install_cpu_support()
patches.router_gemm_without_te(None)
from megatron.core.transformer.moe import moe_utils
from megatron.core.transformer.moe.router import TopKRouter
from megatron.core.transformer.transformer_config import TransformerConfig
from primus_hydra.backends.torch.moe import MoE, balance_over_data_parallel
from test_moe_balancing_against_megatron import moe_model


def compare(case):
    micro_batches = [x.chunk(world, dim=0)[rank] for x in case["micro_batches"]]  # (batch, seq, hidden) here
    experts, hidden = case["weight"].shape
    config = TransformerConfig(num_layers=1, hidden_size=hidden, num_attention_heads=2, num_moe_experts=experts,
                               moe_router_topk=case["top_k"], moe_router_score_function=case["score"],
                               moe_router_load_balancing_type=case["balancing"], moe_aux_loss_coeff=case["coeff"],
                               use_cpu_initialization=True, add_bias_linear=False)
    router = TopKRouter(config, pg_collection=moe_utils.get_default_pg_collection())
    router.set_layer_number(1)
    router.weight.data.copy_(case["weight"])
    router.train()
    tracked = {"aux_loss": "load_balancing_loss", "seq_aux_loss": "seq_load_balancing_loss",
               "global_aux_loss": "global_load_balancing_loss"}[case["balancing"]]
    moe_utils.clear_aux_losses_tracker()  # the tracker is megatron-core's global: the case before left its sums
    megatron_losses, before = [], 0.0
    for x in micro_batches:
        probs, _ = router(x.transpose(0, 1).contiguous())  # megatron-core's layout: (seq, batch, hidden)
        (probs.sum() * 0).backward()  # only the balancing loss's gradient reaches the router weight
        total = moe_utils.get_moe_layer_wise_logging_tracker()[tracked]["values"][0].item()
        megatron_losses.append((total - before) * case["coeff"])  # the tracker sums loss / coeff per layer
        before = total

    native = MoE(moe_model(router_score_function=case["score"], load_balancing_type=case["balancing"]))
    for param in (native.w1, native.w2, native.w3):
        torch.nn.init.normal_(param, std=0.1)
    native.router.weight.data.copy_(case["weight"])
    balance_over_data_parallel(native, None, torch.distributed.get_world_size())
    native.train()
    native_losses = []
    for x in micro_batches:
        native(x)
        native.aux_loss.backward()
        native_losses.append(native.aux_loss.item())
    return {"megatron": megatron_losses, "native": native_losses, "megatron_grad": router.weight.grad,
            "native_grad": native.router.weight.grad}


torch.save({name: compare(case) for name, case in torch.load(inputs).items()}, out)
"""


def moe_model(**moe) -> DictConfig:
    model = OmegaConf.structured(ModelConfig)
    model.hidden_size = HIDDEN
    for key, value in {"num_experts": EXPERTS, "top_k": TOP_K, "ffn_hidden_size": 4, "aux_loss_coeff": COEFF,
                       **moe}.items():
        model.moe[key] = value
    return model


def run_ranks(tmp_path, world: int) -> list[dict]:
    """Each rank's results of every case (balancing, score): the same router weight and micro-batches for all."""
    torch.manual_seed(0)
    data = {"weight": torch.randn(EXPERTS, HIDDEN) * 0.5, "micro_batches": [torch.randn(4, 6, HIDDEN) for _ in range(3)],
            "top_k": TOP_K, "coeff": COEFF}
    torch.save({(balancing, score): {**data, "balancing": balancing, "score": score} for balancing, score in CASES},
               tmp_path / "cases.pt")
    path = [str(REPO / "src"), str(REPO / "tests"), str(REPO / "tests" / "integration"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(tmp_path / "cases.pt"), str(tmp_path / f"out{rank}.pt"),
                               str(rank), str(world), str(tmp_path / "store")], env=env, stderr=subprocess.PIPE,
                              text=True) for rank in range(world)]
    for process in ranks:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
    return [torch.load(tmp_path / f"out{rank}.pt") for rank in range(world)]


@pytest.fixture(scope="module")
def ranks_of(tmp_path_factory):
    """world -> each rank's results of every case, computed once (one process per rank for all cases)."""
    cache: dict[int, list[dict]] = {}

    def ranks(world: int) -> list[dict]:
        if world not in cache:
            cache[world] = run_ranks(tmp_path_factory.mktemp(f"world{world}"), world)
        return cache[world]

    return ranks


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("balancing,score", CASES)
def test_native_balancing_loss_and_router_gradient_are_megatron_cores(ranks_of, world, balancing, score):
    for rank in ranks_of(world):
        result = rank[balancing, score]
        assert result["native"] == pytest.approx(result["megatron"], rel=1e-5)
        torch.testing.assert_close(result["native_grad"], result["megatron_grad"], rtol=1e-5, atol=1e-9)


def test_two_ranks_global_aux_loss_adds_up_to_the_one_process_loss(ranks_of):
    one = ranks_of(1)[0]["global_aux_loss", "softmax"]
    two = [rank["global_aux_loss", "softmax"] for rank in ranks_of(2)]
    assert [a + b for a, b in zip(two[0]["native"], two[1]["native"])] == pytest.approx(one["native"], rel=1e-5)


def test_sqrtsoftplus_balancing_loss_is_megatron_cores_switch_loss_on_normalised_scores(tmp_path):
    torch.manual_seed(0)
    native = MoE(moe_model(router_score_function="sqrtsoftplus", aux_loss_coeff=COEFF))
    for param in native.parameters():
        torch.nn.init.normal_(param, std=0.5)
    x = torch.randn(2, 6, HIDDEN)
    native(x)
    torch.save(native.router(x.reshape(-1, HIDDEN)).float().detach(), tmp_path / "logits.pt")
    # megatron-core's own loss function, in its own process (importing megatron-core changes this one's environment)
    switch_loss = (
        "import sys, torch\n"
        "from megatron.core.transformer.moe.moe_utils import switch_load_balancing_loss_func\n"
        "scores = torch.nn.functional.softplus(torch.load(sys.argv[1])).sqrt()\n"
        f"routing_map = torch.zeros_like(scores).scatter(1, scores.topk({TOP_K}, dim=1).indices, 1.0)\n"
        "print(switch_load_balancing_loss_func(scores / scores.sum(-1, keepdim=True), routing_map.sum(0), "
        f"scores.shape[0], {TOP_K}, {EXPERTS}, {COEFF}).item())\n")
    result = subprocess.run([sys.executable, "-c", switch_loss, str(tmp_path / "logits.pt")], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert native.aux_loss.item() == pytest.approx(float(result.stdout.split()[-1]), rel=1e-6)


def test_backend_megatron_refuses_sqrtsoftplus_before_it_trains(tmp_path):
    result = primus(f"hydra.run.dir={tmp_path / 'run'}", "backend=megatron", "model=moe_tiny",
                    "model.moe.router_score_function=sqrtsoftplus", cwd=tmp_path)
    assert result.returncode != 0
    assert any("moe_router_score_function=sqrtsoftplus (model.moe.router_score_function): this megatron-core routes "
               "with softmax or sigmoid only; train this model with backend=torch" in line
               for line in error_lines(result.stderr)), result.stderr[-2000:]


def test_backend_torch_and_megatron_train_the_same_curve_with_global_aux_loss(tmp_path):
    """Two micro-batches a step (the running average of the loads matters), a coefficient large enough that the
    balancing loss moves the weights (the curve with aux_loss is another one)."""
    common = [*SHORT_RUN, "model=moe_tiny", "model.moe.load_balancing_type=global_aux_loss", "model.moe.aux_loss_coeff=0.5"]
    curves = {}
    for backend, extra in (("torch", []), ("megatron", ["backend.dataset=native"])):
        run = tmp_path / backend / "run"
        result = primus(f"hydra.run.dir={run}", f"backend={backend}", *common, *extra, cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        curves[backend] = losses(run)
    assert_same_curve(curves["megatron"], curves["torch"])
