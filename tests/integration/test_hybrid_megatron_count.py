"""A hybrid model, translated for Megatron (args.py, hybrid_args.py) and built by megatron-core 0.16.1 itself on the
meta device, has exactly the parameter count of the project's model math (config/hybrid_math.py): MambaModel
with a local (non Transformer Engine) MambaStack spec for Mamba-2 layers, and megatron-core's GatedDeltaNet
mixer for the gated_delta_net layer's own weights.

Two GPU-only pieces are stood in for so that the modules construct on this CPU: mamba_ssm's gated RMSNorm (one
weight per channel, as mamba_ssm.ops.triton.layernorm_gated.RMSNorm holds) and Transformer Engine's TENorm,
which MambaStack hard-codes for its final norm (megatron-core's own WrappedTorchNorm takes its place); the
mamba_ssm and flash-linear-attention import checks are switched on, their kernels being used in forward only.
Nothing changes a shape: the counts are megatron-core's."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.compose import REPO
from helpers.hf_models import needs_transformers
from helpers.libraries import needs_megatron_core

pytestmark = [pytest.mark.slow, needs_megatron_core]

MAMBA = ["model.hybrid.layer_pattern='M*-M'", "model.hybrid.mamba_state_dim=16", "model.hybrid.mamba_head_dim=32",
         "model.hybrid.mamba_num_groups=2"]
GDN = ["model.hybrid.mixer=gated_delta_net", "model.hybrid.linear_key_head_dim=32",
       "model.hybrid.linear_value_head_dim=32", "model.hybrid.linear_num_key_heads=4",
       "model.hybrid.linear_num_value_heads=8"]
FIXTURES = {
    "mamba2": MAMBA,
    "mamba2_layernorm_tied_learned_positions": [*MAMBA, "model.normalization=layernorm", "model.tie_embeddings=true",
                                                "model.position_embedding=learned_absolute",
                                                "model.hybrid.mamba_num_heads=8",
                                                "model.hybrid.layer_pattern='MM*-M-'", "model.num_layers=6"],
    "gated_delta_net": [*MAMBA, *GDN],
    # the presets of Megatron-Bridge's Mamba-2 providers and Primus's Zebra-Llama providers, at their full sizes
    **{name: [f"model={name}"] for name in ("mamba2_130m", "zebra_llama_1b", "zebra_llama_3b", "zebra_llama_8b")},
}

BUILD = """
import json, sys
sys.path.insert(0, "tests")
import torch
import torch.distributed as dist
import torch.nn.functional as F

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)
import megatron.core.ssm.mamba_block as block_module
import megatron.core.ssm.gated_delta_net as gdn_module
import megatron.core.ssm.mamba_mixer as mixer_module
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.models.mamba.mamba_model import MambaModel
from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
from megatron.core.ssm.mamba_block import MambaStack, MambaStackSubmodules
from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
from megatron.core.ssm.mamba_mixer import MambaMixer, MambaMixerSubmodules
from megatron.core.ssm.mlp_layer import MLPLayer
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from megatron.core.transformer.spec_utils import ModuleSpec, build_module
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules
from primus_hydra.backends.megatron.cpu_patches import install_cpu_support
install_cpu_support()  # after the imports: it rewrites torch.cuda in the megatron-core modules loaded
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
from helpers.compose import compose_primus
from primus_hydra.backends.megatron.args import build_megatron_args
from primus_hydra.backends.megatron.core_config import transformer_config
from primus_hydra.config.hybrid_math import mixer_layer_weights, norm_weights
from primus_hydra.config.layout import parallel_layout
from primus_hydra.config.model_math import count_parameters


class GatedNorm(torch.nn.Module):  # mamba_ssm's gated RMSNorm: one weight per channel
    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None, dtype=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))


mixer_module.HAVE_MAMBA_SSM = True
gdn_module.HAVE_FLA = True  # its kernels run in forward only
mixer_module.ExtendedRMSNorm = GatedNorm
block_module.TENorm = WrappedTorchNorm
model_parallel_cuda_manual_seed(0)
linear = dict(in_proj=ColumnParallelLinear, out_proj=RowParallelLinear)
stack = ModuleSpec(module=MambaStack, submodules=MambaStackSubmodules(
    mamba_layer=ModuleSpec(module=MambaLayer, submodules=MambaLayerSubmodules(
        norm=WrappedTorchNorm, mamba_bda=get_bias_dropout_add,
        mixer=ModuleSpec(module=MambaMixer, submodules=MambaMixerSubmodules(**linear)))),
    attention_layer=ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
        input_layernorm=WrappedTorchNorm, self_attn_bda=get_bias_dropout_add,
        self_attention=ModuleSpec(module=SelfAttention, params={"attn_mask_type": AttnMaskType.causal},
                                  submodules=SelfAttentionSubmodules(linear_qkv=ColumnParallelLinear,
                                                                     core_attention=DotProductAttention,
                                                                     linear_proj=RowParallelLinear)))),
    mlp_layer=ModuleSpec(module=MLPLayer, submodules=TransformerLayerSubmodules(
        pre_mlp_layernorm=WrappedTorchNorm, mlp_bda=get_bias_dropout_add,
        mlp=ModuleSpec(module=MLP, submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear,
                                                            linear_fc2=RowParallelLinear))))))


def mla_stack():  # multi-latent attention layers (Zebra-Llama's): megatron-core's local MLA layer, its MLP off
    import dataclasses
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.identity_op import IdentityOp

    from megatron.core.transformer import multi_latent_attention

    multi_latent_attention.HAVE_TE = False  # its kernel is Transformer Engine's only, and holds no parameters
    layer = get_gpt_layer_local_spec(multi_latent_attention=True, qk_layernorm=True)
    attention_submodules = dataclasses.replace(layer.submodules.self_attention.submodules, core_attention=IdentityOp)
    attention = dataclasses.replace(layer, submodules=dataclasses.replace(
        layer.submodules, pre_mlp_layernorm=IdentityOp, mlp=IdentityOp, mlp_bda=IdentityOp,
        self_attention=dataclasses.replace(layer.submodules.self_attention, submodules=attention_submodules)))
    return dataclasses.replace(stack, submodules=dataclasses.replace(stack.submodules, attention_layer=attention))


def built(cfg):
    args = build_megatron_args(cfg, parallel_layout(cfg, 1))
    config = transformer_config(args, fused=False, use_cpu_initialization=True)
    if args["hybrid_override_pattern"].count("M") and cfg.model.hybrid.mixer == "gated_delta_net":
        with torch.device("meta"):  # one mixer, beside its layer's input norm
            mixer = GatedDeltaNet(config, GatedDeltaNetSubmodules(out_norm=WrappedTorchNorm, **linear),
                                  layer_number=1, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
        return [sum(p.numel() for p in mixer.parameters()) + norm_weights(cfg.model, cfg.model.hidden_size),
                sum(mixer_layer_weights(cfg.model))]
    with torch.device("meta"):
        model = MambaModel(config=config, mamba_stack_spec=mla_stack() if cfg.model.mla.enabled else stack, vocab_size=args["padded_vocab_size"]
                           if "padded_vocab_size" in args else cfg.model.vocab_size,
                           max_sequence_length=args["max_position_embeddings"],
                           hybrid_override_pattern=args["hybrid_override_pattern"],
                           position_embedding_type=args["position_embedding_type"],
                           share_embeddings_and_output_weights=not args["untie_embeddings_and_output_weights"])
    return [sum(p.numel() for p in model.parameters()), count_parameters(cfg.model)]


fixtures = json.loads(sys.argv[1])
print(json.dumps({name: built(compose_primus("backend=megatron", "module.data.source=mock", *overrides))
                  for name, overrides in fixtures.items()}))
"""


@pytest.fixture(scope="module")
def counts() -> dict[str, list[int]]:
    result = subprocess.run([sys.executable, "-c", BUILD, json.dumps(FIXTURES)], capture_output=True, text=True,
                            cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_megatron_core_builds_the_hybrid_with_its_model_math_count(counts, name):
    built, model_math = counts[name]
    assert built == model_math, f"{name}: megatron-core {built:,} vs model math {model_math:,}"


def test_the_mamba_fixture_is_the_unit_tests_count(counts):
    assert counts["mamba2"][0] == 1_691_616


@needs_transformers
@pytest.mark.parametrize("name", ["mamba2_130m", "mamba2_370m"])
def test_bridges_mamba2_presets_have_the_count_transformers_builds(name):
    """Megatron-Bridge's Mamba-2 providers (untied output layer) as transformers' Mamba2ForCausalLM of the same sizes,
    built on the meta device: the same parameter count as the preset's model math."""
    import torch
    from transformers import Mamba2Config, Mamba2ForCausalLM

    from helpers.compose import compose_primus
    from primus_hydra.config.hybrid_math import mamba_heads
    from primus_hydra.config.model_math import count_parameters

    model = compose_primus(f"model={name}").model
    hybrid = model.hybrid
    config = Mamba2Config(hidden_size=model.hidden_size, num_hidden_layers=model.num_layers, vocab_size=model.vocab_size,
                          state_size=hybrid.mamba_state_dim, head_dim=hybrid.mamba_head_dim, n_groups=hybrid.mamba_num_groups,
                          num_heads=mamba_heads(model), expand=mamba_heads(model) * hybrid.mamba_head_dim // model.hidden_size,
                          conv_kernel=4, use_bias=False, use_conv_bias=True,
                          tie_word_embeddings=model.tie_embeddings)
    with torch.device("meta"):
        built = sum(param.numel() for param in Mamba2ForCausalLM(config).parameters())
    assert built == count_parameters(model)
