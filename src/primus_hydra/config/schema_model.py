"""The canonical model schema: one preset per model, every backend adapter translates from these names.

Names follow Megatron/Primus where they exist (hidden_size, ffn_hidden_size, num_attention_heads, ...).
"""
from __future__ import annotations

from dataclasses import field
from typing import Optional

from omegaconf import MISSING

from primus_hydra.config.choices import Choice
from primus_hydra.util.records import record


class RopeScalingType(Choice):
    none = "none"
    linear = "linear"
    llama3 = "llama3"
    yarn = "yarn"


@record
class RopeScalingConfig:
    type: RopeScalingType = RopeScalingType.none
    factor: float = 1.0
    # llama3 (Llama 3.1+) frequency-band scaling
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    # YaRN (DeepSeek V2/V3)
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0


class RouterScoreFunction(Choice):
    softmax = "softmax"
    sigmoid = "sigmoid"
    sqrtsoftplus = "sqrtsoftplus"  # sqrt(softplus(logit)) per expert (DeepSeek-V4, Primus's V4 router)


class LoadBalancingType(Choice):
    aux_loss = "aux_loss"          # Switch/GShard auxiliary loss over the batch
    seq_aux_loss = "seq_aux_loss"  # DeepSeek-V3's per-sequence auxiliary loss
    # the auxiliary loss with each expert's load counted over the global batch: every data-parallel rank and every
    # micro-batch of the step so far (megatron-core's global_aux_loss; Qwen3-Next, Qwen3.5)
    global_aux_loss = "global_aux_loss"
    none = "none"                  # no balancing term (aux-loss-free uses router_bias_update_rate)


@record
class MoEConfig:
    """Mixture of experts. num_experts == 0 means a dense model."""

    num_experts: int = 0
    top_k: int = 2
    ffn_hidden_size: int = 0  # intermediate size of one routed expert
    shared_experts: int = 0  # number of always-on shared experts (DeepSeek)
    shared_expert_ffn_hidden_size: Optional[int] = None  # default: shared_experts * ffn_hidden_size
    first_dense_layers: int = 0  # leading layers with a dense FFN (DeepSeek first_k_dense_replace)
    # after those, layer i (from 0) is an MoE layer when (i + 1) % interleave_step == 0, the others dense
    # (Llama 4's interleave_moe_layer_step: 2 alternates dense and MoE layers)
    interleave_step: int = 1
    score_before_experts: bool = False  # the router's weight scales the expert's input, not its output (Llama 4)
    router_score_function: RouterScoreFunction = RouterScoreFunction.softmax
    router_topk_scaling_factor: float = 1.0  # DeepSeek routed_scaling_factor
    router_num_groups: int = 1  # device-limited routing: groups of experts (DeepSeek n_group)
    router_group_topk: int = 1  # groups a token may route to (DeepSeek topk_group)
    router_norm_topk_prob: bool = True  # renormalise the top-k weights to sum to one
    router_enable_expert_bias: bool = False  # aux-loss-free balancing bias (DeepSeek-V3)
    router_bias: bool = False  # a learned bias on the router's logits (gpt-oss)
    experts_bias: bool = False  # a bias on each routed expert's two projections (gpt-oss)
    router_bias_update_rate: float = 0.0
    load_balancing_type: LoadBalancingType = LoadBalancingType.aux_loss
    aux_loss_coeff: float = 0.01
    z_loss_coeff: float = 0.0
    capacity_factor: Optional[float] = None  # null: dropless


@record
class MLAConfig:
    """DeepSeek multi-head latent attention. enabled=false means standard (GQA) attention."""

    enabled: bool = False
    q_lora_rank: Optional[int] = None  # null: queries are not low-rank (DeepSeek-V2-Lite)
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128


class Normalization(Choice):
    rmsnorm = "rmsnorm"
    layernorm = "layernorm"  # a weight and a bias per norm


class Activation(Choice):
    """The gated MLP's gate activation: silu(gate) * up (SwiGLU) or gelu(gate) * up, tanh approximation (GeGLU)."""

    swiglu = "swiglu"
    geglu = "geglu"  # Gemma's


class PositionEmbedding(Choice):
    rope = "rope"
    none = "none"  # NoPE: no position signal outside the layers (latent attention keeps its own rotary part)
    learned_absolute = "learned_absolute"  # a learned table of max_position_embeddings x hidden_size (Megatron's default)


class HybridMixer(Choice):
    """What the `M` layers of a hybrid layer pattern are."""

    mamba2 = "mamba2"  # megatron-core's MambaMixer (Mamba-2's state-space duality)
    gated_delta_net = "gated_delta_net"  # Gated DeltaNet (the linear_* sizes)
    kimi_delta_attention = "kimi_delta_attention"  # Kimi Delta Attention (the linear_* sizes; Primus's layer)


@record
class HybridConfig:
    """A hybrid (state-space) model: layer_pattern null means a plain transformer (attention + FFN per layer).

    layer_pattern is Megatron's hybrid_override_pattern, one letter per layer: M a `mixer` layer, * an attention
    layer, - an MLP layer, E a MoE layer; its length is model.num_layers (each letter is a whole layer)."""

    layer_pattern: Optional[str] = None
    mixer: HybridMixer = HybridMixer.mamba2
    mamba_state_dim: int = 128  # SSM state size N
    mamba_head_dim: int = 64
    mamba_num_groups: int = 8  # groups sharing B and C
    mamba_num_heads: Optional[int] = None  # null: 2 * hidden_size // mamba_head_dim (megatron-core's expand=2)
    linear_conv_kernel_dim: int = 4  # gated_delta_net / kimi_delta_attention: short causal convolution width
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32


@record
class GlobalAttentionConfig:
    """The full-attention layers of a sliding-window model, where they differ from the window layers (Gemma 4's
    global layers); null keeps the model's own value."""

    head_dim: Optional[int] = None  # Gemma 4: 512 (the window layers: model.head_dim, 256)
    num_kv_heads: Optional[int] = None
    shared_kv: bool = False  # one projection gives K and V (no V projection; Gemma 4's attention_k_eq_v)
    rope_theta: Optional[float] = None  # the window layers keep model.rope_theta
    rope_fraction: float = 1.0  # the share of each head's channels RoPE rotates (Gemma 4: 0.25)


# Gemma 4's layer features beside family=gemma4 (whose layer it is: config/model_math.py), each with the value that
# turns it off (the default of its field below); a backend without BackendTraits.gemma4_layers refuses them
GEMMA4_LAYERS_OFF = {"activation": "swiglu", "final_logit_softcap": None, "global_attention.head_dim": None,
                     "global_attention.num_kv_heads": None, "global_attention.shared_kv": False,
                     "global_attention.rope_theta": None, "global_attention.rope_fraction": 1.0}
GEMMA4_FAMILY = "gemma4"


# gpt-oss's layer features, each with the value that turns it off (the default of its field below); a backend
# without BackendTraits.gpt_oss_layers refuses a model that turns any on
GPT_OSS_LAYERS_OFF = {"attention_sinks": False, "sliding_window": None, "attention_output_bias": False,
                      "swiglu_limit": None, "moe.router_bias": False, "moe.experts_bias": False}


@record
class ModelConfig:
    name: str = MISSING
    # a local Hugging Face folder: its config.json gives the architecture (config/hf_config.py)
    from_hf: Optional[str] = None
    # llama | mixtral | qwen2 | qwen3 | deepseek | ... (informational, used by adapters); gemma4 also says the layer is
    # Gemma 4's: norms after attention and after the MLP, a weightless norm on V, and in MoE layers norms around each
    # branch and the router's scaled input norm and per-expert scales (config/model_math.py counts them)
    family: str = "llama"
    hidden_size: int = MISSING
    num_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_kv_heads: int = MISSING  # == num_attention_heads for MHA; Megatron's num_query_groups
    head_dim: Optional[int] = None  # null: hidden_size // num_attention_heads
    ffn_hidden_size: int = MISSING
    vocab_size: int = MISSING
    max_position_embeddings: int = MISSING
    rope_theta: float = 10000.0
    rope_scaling: RopeScalingConfig = field(default_factory=RopeScalingConfig)
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False  # RMSNorm on per-head q and k (Qwen3)
    attention_output_bias: bool = False  # a bias on the attention's output projection (gpt-oss)
    attention_sinks: bool = False  # a learned logit per head that joins every softmax and takes no value (gpt-oss)
    # the keys a sliding-window layer attends to (itself included); null: every layer attends to the whole prefix
    sliding_window: Optional[int] = None
    # with sliding_window: layer i (from 0) attends to the whole prefix when (i + 1) % full_attention_every == 0, the
    # others through the window (gpt-oss: 2 alternates window and full, from layer 0); 0: every layer has the window
    full_attention_every: int = 0
    # null: SwiGLU (silu(gate) * up); a number: gpt-oss's clamped variant, gate clamped above and up to +-limit,
    # gate * sigmoid(1.702 * gate) * (up + 1)
    swiglu_limit: Optional[float] = None
    activation: Activation = Activation.swiglu
    final_logit_softcap: Optional[float] = None  # logits -> cap * tanh(logits / cap) (Gemma: 30)
    global_attention: GlobalAttentionConfig = field(default_factory=GlobalAttentionConfig)
    init_std: float = 0.02
    normalization: Normalization = Normalization.rmsnorm
    position_embedding: PositionEmbedding = PositionEmbedding.rope
    moe: MoEConfig = field(default_factory=MoEConfig)
    mla: MLAConfig = field(default_factory=MLAConfig)
    hybrid: HybridConfig = field(default_factory=HybridConfig)
