"""The native model: a Llama-style decoder (RMSNorm, RoPE, GQA or DeepSeek MLA, SwiGLU, optional MoE).

Plain modules in the spirit of nanoGPT. Built on the meta device first, so that any zoo preset can be
instantiated for counting without memory; `init_weights` runs after `to_empty` on the real device. At inference a
`KVCache` passed to `Transformer.forward` keeps each layer's keys and values, so that decoding feeds one new token
per step (backends/torch/generation.py); training passes none. Packed conversations (module.data.source=sft with
module.data.packing) pass `documents`: each attends within its own conversation, at positions from 0, as if alone.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from primus_hydra.backends.common.weights import normal_
from primus_hydra.backends.torch.layers import FeedForward, RMSNorm
from primus_hydra.backends.torch.moe import MoE
from primus_hydra.config.model_math import is_moe_layer


# -- rotary position embeddings -----------------------------------------------------------------------------
def _yarn_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 or mscale == 0 else 0.1 * mscale * math.log(scale) + 1.0


def rope_inverse_frequencies(dim: int, theta: float, scaling) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    kind = str(scaling.type)
    if kind == "linear":
        return inv_freq / scaling.factor
    if kind == "llama3":  # Llama 3.1: leave high frequencies, divide low ones, blend in between
        old_len = scaling.original_max_position_embeddings
        low_wavelen, high_wavelen = old_len / scaling.low_freq_factor, old_len / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
        blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, blended)
        return torch.where(wavelen < high_wavelen, inv_freq, scaled)
    if kind == "yarn":  # DeepSeek V2/V3: interpolate low frequencies, extrapolate high ones, ramp between
        def correction_dim(rotations: float) -> float:
            return dim * math.log(scaling.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low = max(math.floor(correction_dim(scaling.beta_fast)), 0)
        high = min(math.ceil(correction_dim(scaling.beta_slow)), dim - 1)
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / max(high - low, 1e-3)).clamp(0, 1)
        return inv_freq / scaling.factor * ramp + inv_freq * (1 - ramp)
    return inv_freq


def rope_attention_scale(scaling) -> float:
    """YaRN scales cos/sin by mscale(factor, mscale) / mscale(factor, mscale_all_dim)."""
    if str(scaling.type) != "yarn":
        return 1.0
    return _yarn_mscale(scaling.factor, scaling.mscale) / _yarn_mscale(scaling.factor, scaling.mscale_all_dim)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, theta: float, scaling):
        super().__init__()
        self.dim, self.theta, self.scaling = dim, theta, scaling
        self._cache: dict = {}

    def forward(self, seq_len: int, device: torch.device, offset: int = 0,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of positions offset .. offset + seq_len - 1, (seq, dim); with `positions` (batch, seq), of
        those positions, (batch, seq, dim). The table is kept and grows by doubling while decoding; each position's
        values do not depend on the table's length."""
        needed = offset + seq_len
        cached = self._cache.get(str(device))
        if cached is None or cached[0].shape[0] < needed:
            length = needed if offset == 0 else max(needed, 2 * (0 if cached is None else cached[0].shape[0]))
            inv_freq = rope_inverse_frequencies(self.dim, self.theta, self.scaling)
            angles = torch.outer(torch.arange(length, dtype=torch.float64), inv_freq)
            angles = torch.cat([angles, angles], dim=-1)
            scale = rope_attention_scale(self.scaling)
            cached = ((angles.cos() * scale).float().to(device), (angles.sin() * scale).float().to(device))
            self._cache = {str(device): cached}
        cos, sin = cached
        if positions is not None:
            return cos[positions], sin[positions]
        return cos[offset:needed], sin[offset:needed]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, seq, heads, dim); cos and sin (seq, dim) or (batch, seq, dim); rotate-half convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # the heads' axis
    return (x.float() * cos + rotated.float() * sin).type_as(x)


# -- the inference cache -----------------------------------------------------------------------------------
class LayerKV:
    """One attention layer's keys and values of the positions seen so far, (batch, heads, positions, dim)."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def extend(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Appends the new positions; returns the keys and values of every position so far."""
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys, self.values = torch.cat([self.keys, keys], dim=2), torch.cat([self.values, values], dim=2)
        return self.keys, self.values


class KVCache:
    """Every layer's LayerKV, by layer name: what `Transformer.forward(tokens, cache=...)` fills and reuses."""

    def __init__(self) -> None:
        self.layers: dict[str, LayerKV] = {}

    def layer(self, name: str) -> LayerKV:
        return self.layers.setdefault(name, LayerKV())

    @property
    def length(self) -> int:
        return next(iter(self.layers.values())).length if self.layers else 0


class PackedDocuments:
    """Which document each position of a packed sequence belongs to, as attention uses it: `mask` (batch, 1, seq,
    seq) lets a query see the keys of its own document up to itself, and `positions` (batch, seq) restart at 0 where
    each document starts; so each document's logits are those it has alone."""

    def __init__(self, documents: torch.Tensor):
        """documents: (batch, seq) integers, the same along each document and different from one to the next."""
        index = torch.arange(documents.shape[1], device=documents.device)
        causal = index[:, None] >= index[None, :]
        self.mask = ((documents[:, :, None] == documents[:, None, :]) & causal)[:, None]
        starts = torch.ones_like(documents, dtype=torch.bool)
        starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
        self.positions = index - torch.where(starts, index, 0).cummax(dim=1).values


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: PackedDocuments | None = None,
                     **kwargs) -> torch.Tensor:
    """SDPA where query i sits at position (keys - queries + i): the last queries of a cached sequence see every
    earlier key. One query needs no mask; as many queries as keys is plain causal attention, or with `packed`
    causal attention within each document."""
    if packed is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=packed.mask, **kwargs)
    queries, keys = q.shape[2], k.shape[2]
    if queries == keys:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kwargs)
    mask = None if queries == 1 else torch.ones(queries, keys, dtype=torch.bool, device=q.device).tril(keys - queries)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)


# -- attention ---------------------------------------------------------------------------------------------
class Attention(nn.Module):
    """Grouped-query attention (MHA when num_kv_heads == num_attention_heads)."""

    def __init__(self, args):
        super().__init__()
        self.n_heads, self.n_kv_heads = args.num_attention_heads, args.num_kv_heads
        self.head_dim = args.head_dim or args.hidden_size // args.num_attention_heads
        h, hd = args.hidden_size, self.head_dim
        self.wq = nn.Linear(h, self.n_heads * hd, bias=args.qkv_bias)
        self.wk = nn.Linear(h, self.n_kv_heads * hd, bias=args.qkv_bias)
        self.wv = nn.Linear(h, self.n_kv_heads * hd, bias=args.qkv_bias)
        self.wo = nn.Linear(self.n_heads * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, args.norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(hd, args.norm_eps) if args.qk_norm else None
        self.rope = RotaryEmbedding(hd, args.rope_theta, args.rope_scaling)

    def forward(self, x: torch.Tensor, cache: LayerKV | None = None,
                packed: PackedDocuments | None = None) -> torch.Tensor:
        batch, seq, _ = x.shape
        offset = cache.length if cache is not None else 0
        # -1 heads: under tensor parallelism each rank holds a slice of the heads
        q = self.wq(x).view(batch, seq, -1, self.head_dim)
        k = self.wk(x).view(batch, seq, -1, self.head_dim)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = self.rope(seq, x.device, offset, None if packed is None else packed.positions)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.extend(k, v)
        out = causal_attention(q, k, v, packed, enable_gqa=q.shape[1] != k.shape[1])
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class LatentAttention(nn.Module):
    """DeepSeek multi-head latent attention: low-rank compressed KV (and optionally Q), decoupled RoPE dims."""

    def __init__(self, args):
        super().__init__()
        mla, h = args.mla, args.hidden_size
        self.n_heads = args.num_attention_heads
        self.nope_dim, self.rope_dim, self.v_dim = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
        self.kv_lora_rank = mla.kv_lora_rank
        qk_dim = self.nope_dim + self.rope_dim
        if mla.q_lora_rank:
            self.wq_a = nn.Linear(h, mla.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(mla.q_lora_rank, args.norm_eps)
            self.wq_b = nn.Linear(mla.q_lora_rank, self.n_heads * qk_dim, bias=False)
        else:
            self.wq = nn.Linear(h, self.n_heads * qk_dim, bias=False)
        self.wkv_a = nn.Linear(h, mla.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_norm = RMSNorm(mla.kv_lora_rank, args.norm_eps)
        self.wkv_b = nn.Linear(mla.kv_lora_rank, self.n_heads * (self.nope_dim + self.v_dim), bias=False)
        self.wo = nn.Linear(self.n_heads * self.v_dim, h, bias=False)
        self.rope = RotaryEmbedding(self.rope_dim, args.rope_theta, args.rope_scaling)
        mscale = _yarn_mscale(args.rope_scaling.factor, args.rope_scaling.mscale_all_dim) if str(args.rope_scaling.type) == "yarn" else 1.0
        self.softmax_scale = qk_dim**-0.5 * mscale * mscale

    def forward(self, x: torch.Tensor, cache: LayerKV | None = None,
                packed: PackedDocuments | None = None) -> torch.Tensor:
        batch, seq, _ = x.shape
        offset = cache.length if cache is not None else 0
        q = self.wq_b(self.q_norm(self.wq_a(x))) if hasattr(self, "wq_a") else self.wq(x)
        q = q.view(batch, seq, -1, self.nope_dim + self.rope_dim)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        kv_latent, k_rope = self.wkv_a(x).split([self.kv_lora_rank, self.rope_dim], dim=-1)
        kv = self.wkv_b(self.kv_norm(kv_latent)).view(batch, seq, -1, self.nope_dim + self.v_dim)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        cos, sin = self.rope(seq, x.device, offset, None if packed is None else packed.positions)
        q_rope = apply_rotary(q_rope, cos, sin)
        k_rope = apply_rotary(k_rope.unsqueeze(2), cos, sin).expand(-1, -1, q_nope.shape[2], -1)
        q = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2)
        k, v = torch.cat([k_nope, k_rope], dim=-1).transpose(1, 2), v.transpose(1, 2)
        if cache is not None:  # the per-head keys and values, as Hugging Face's DeepSeek caches them
            k, v = cache.extend(k, v)
        out = causal_attention(q, k, v, packed, scale=self.softmax_scale)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


# -- the decoder -------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, args, layer_index: int):
        super().__init__()
        self.attention_norm = RMSNorm(args.hidden_size, args.norm_eps)
        self.attention = LatentAttention(args) if args.mla.enabled else Attention(args)
        self.ffn_norm = RMSNorm(args.hidden_size, args.norm_eps)
        uses_moe = is_moe_layer(args, layer_index)
        self.feed_forward = MoE(args) if uses_moe else FeedForward(args.hidden_size, args.ffn_hidden_size)

    def forward(self, x: torch.Tensor, cache: LayerKV | None = None,
                packed: PackedDocuments | None = None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cache, packed)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """The decoder. A pipeline stage is the same class with some parts removed (set to None / deleted from
    `layers`), so parameter names stay those of the full model: checkpoints reshard between layouts."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleDict({str(i): Block(args, i) for i in range(args.num_layers)})
        self.norm = RMSNorm(args.hidden_size, args.norm_eps)
        self.output = None if args.tie_embeddings else nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Normal(0, init_std); residual output projections scaled by 1/sqrt(2 * num_layers) (GPT-2). Each rank
        draws only its shard, the same values whatever the layout (weights.py)."""
        std = self.args.init_std
        residual_std = std / (2 * self.args.num_layers) ** 0.5
        for name, param in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("_norm.weight"):
                param.fill_(1.0)
            elif name.endswith("expert_bias") or name.endswith(".bias"):
                param.zero_()
            elif name.endswith(("wo.weight", "w2.weight")) or name.endswith(".w2"):
                normal_(param, residual_std, seed, name)
            else:
                normal_(param, std, seed, name)

    def moe_aux_loss(self) -> torch.Tensor:
        losses = [layer.feed_forward.aux_loss for layer in self.layers.values() if hasattr(layer.feed_forward, "aux_loss")]
        return torch.stack(losses).sum() if losses else torch.zeros(())

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None,
                documents: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids -> logits. A middle or last pipeline stage receives hidden states instead of ids. With a
        `cache`, `tokens` are the positions after those cached, and their keys and values join the cache. With
        `documents` (batch, seq: each position's document, see PackedDocuments), no position attends across one."""
        x = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        packed = None if documents is None else PackedDocuments(documents)
        for name, layer in self.layers.items():
            x = layer(x, None if cache is None else cache.layer(name), packed)
        if self.norm is None:  # not the last pipeline stage
            return x
        x = self.norm(x)
        return self.output(x) if self.output is not None else x @ self.tok_embeddings.weight.t()


def build_model_on_meta(args) -> Transformer:
    """The model with no storage: count parameters, parallelize, then materialize."""
    with torch.device("meta"):
        return Transformer(args)


def materialize(model: Transformer, device: torch.device, seed: int) -> Transformer:
    """Storage on `device` for what this rank holds (after parallelize: its shards only), then its weights."""
    model.to_empty(device=device)
    model.init_weights(seed)
    return model
