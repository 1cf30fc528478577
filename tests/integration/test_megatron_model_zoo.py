"""Every zoo preset, translated for Megatron (args.py) and built by megatron-core itself (GPTModel, the local layer
spec, on the meta device), has exactly the parameter count of the project's model math: the translation means the
published architecture (those counts equal the published ones: tests/unit/test_model_zoo.py).

deepseek_v3 (58 MoE layers of 256 experts) takes 23 s to build whole on meta, qwen3_30b_a3b (48 of 128) 7 s: a model
whose layers are all MoE, or dense then all MoE, with 128 experts or more, is built with its dense layers and 1 and
2 MoE layers, and its count is the first plus the other MoE layers times the difference (its MoE layers are the same
module by construction). llama4_17bx128e (MoE every other layer) is built whole."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.compose import CONF_DIR, REPO
from helpers.libraries import needs_megatron_core

pytestmark = [pytest.mark.slow, needs_megatron_core]

# gpt-oss's layers are torchtitan's only (backend=megatron refuses them: test_gpt_oss_layers), Gemma 4's MaxText's;
# the hybrid presets (mamba2_*, zebra_llama_*) are megatron-core's MambaModel, counted in test_hybrid_megatron_count.py
PRESETS = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml")
                 if not path.stem.startswith(("gpt_oss", "mamba", "zebra", "gemma4")))
# one process for all presets: a gloo group of one, megatron-core's parallel state, the CPU patches
COUNT_ALL = """
import json, sys
sys.path.insert(0, "tests")
import torch.distributed as dist
from helpers.compose import compose_primus
from primus_hydra.backends.megatron import patches
from primus_hydra.backends.megatron.args import build_megatron_args
from primus_hydra.backends.megatron.core_model import count_on_meta
from primus_hydra.backends.megatron.cpu_patches import install_cpu_support
from primus_hydra.config.layout import parallel_layout
from primus_hydra.config.model_math import count_parameters

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)
install_cpu_support()
patches.router_gemm_without_te(None)
def built_count(args):  # built whole, or with its dense layers and 1 and 2 MoE layers (see the module's text)
    many_experts = (args.get("num_experts") or 0) >= 128
    if args.get("moe_layer_freq") == 1 and many_experts:  # every layer MoE
        dense, pattern = 0, lambda n: 1
    elif str(args.get("moe_layer_freq")).startswith("([0]*") and many_experts:  # dense layers first, then MoE
        dense = int(args["moe_layer_freq"].split("[0]*")[1].split("+")[0])
        pattern = lambda n: f"([0]*{dense}+[1]*{n})"
    else:
        return count_on_meta(args)
    with_moe = [count_on_meta({**args, "num_layers": dense + n, "moe_layer_freq": pattern(n)}) for n in (1, 2)]
    return with_moe[0] + (args["num_layers"] - dense - 1) * (with_moe[1] - with_moe[0])


counts = {}
for name in sys.argv[1:]:
    cfg = compose_primus("backend=megatron", f"model={name}", "module.data.source=mock")
    args = build_megatron_args(cfg, parallel_layout(cfg, 1))
    args["make_vocab_size_divisible_by"] = 1  # the vocabulary as published, not padded (Llama 4's 202,048)
    counts[name] = [built_count(args), count_parameters(cfg.model)]
print(json.dumps(counts))
"""


@pytest.fixture(scope="module")
def megatron_counts() -> dict[str, list[int]]:
    result = subprocess.run([sys.executable, "-c", COUNT_ALL, *PRESETS], capture_output=True, text=True, cwd=REPO,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_every_preset_is_counted():
    assert len(PRESETS) == 23 and {"llama3_8b", "deepseek_v3", "mixtral_8x22b", "moe_tiny", "qwen3_30b_a3b",
                                   "llama4_17bx16e", "llama4_17bx128e"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_megatron_core_builds_the_preset_with_its_model_math_count(megatron_counts, name):
    built, model_math = megatron_counts[name]
    assert built == model_math, f"{name}: megatron-core {built:,} vs model math {model_math:,}"


def test_llama3_8b_is_the_published_count_in_megatron_core(megatron_counts):
    assert megatron_counts["llama3_8b"][0] == 8_030_261_248
