"""Which Hugging Face tensor holds which native weight: one table per model, derived from the canonical config.

Pure Python (no torch): the orchestrator checks an HF folder's tensors against it before any worker starts.

Each `HfTensor` is one tensor of the HF checkpoint: its name, its shape, the native parameter it fills and how.
Most are the native tensor itself under another name. Two are not:
- routed experts: HF keeps one tensor per expert (`...experts.<e>.gate_proj.weight`, [f, h]); the native MoE
  stacks them (`feed_forward.w1`, [E, f, h]); `expert` is the index along that first dimension.
- DeepSeek's `rope_interleave`: HF stores the rope rows of q(_b)_proj and kv_a_proj_with_mqa interleaved (pairs
  (x0, x1), (x2, x3), ...) and de-interleaves them before rotate-half; the native model applies rotate-half
  directly, so its rope rows are HF's even rows, then its odd rows (`RopeRows`).
"""
from __future__ import annotations

from typing import Any, Optional

from primus_hydra.config.model_math import is_moe_layer, shared_expert_ffn_hidden_size
from primus_hydra.util.records import record

# canonical gate / up / down of a SwiGLU -> native names
_SWIGLU = (("gate", "w1"), ("up", "w3"), ("down", "w2"))
# per family: the MoE block's HF prefix under a layer and the HF names of one expert's gate / up / down
_MOE_NAMES = {"mixtral": ("block_sparse_moe", {"gate": "w1", "up": "w3", "down": "w2"})}
_DEFAULT_MOE_NAMES = ("mlp", {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"})


@record(frozen=True)
class RopeRows:
    """In every block of `period` rows, rows [start, start + count) are rope dims stored interleaved by HF."""

    period: int
    start: int
    count: int

    def hf_row_of_native(self, row: int) -> int:
        block, within = divmod(row, self.period)
        if not self.start <= within < self.start + self.count:
            return row
        k, half = within - self.start, self.count // 2
        hf_k = 2 * k if k < half else 2 * (k - half) + 1
        return block * self.period + self.start + hf_k

    def native_row_of_hf(self, row: int) -> int:
        block, within = divmod(row, self.period)
        if not self.start <= within < self.start + self.count:
            return row
        k, half = within - self.start, self.count // 2
        return block * self.period + self.start + k // 2 + (k % 2) * half


@record(frozen=True)
class HfTensor:
    hf_name: str
    shape: tuple[int, ...]
    native: str  # the native parameter's name (full-model names: pipeline stages keep them)
    expert: Optional[int] = None  # a routed expert's index in the native stacked [E, ...] tensor
    rope_rows: Optional[RopeRows] = None


def _head_dim(model: Any) -> int:
    return int(model.head_dim or model.hidden_size // model.num_attention_heads)


def _attention(model: Any, hf: str, native: str, rope_interleave: bool) -> list[HfTensor]:
    h, heads = int(model.hidden_size), int(model.num_attention_heads)
    if not model.mla.enabled:
        hd, kv = _head_dim(model), int(model.num_kv_heads)
        out = [HfTensor(f"{hf}.q_proj.weight", (heads * hd, h), f"{native}.wq.weight"),
               HfTensor(f"{hf}.k_proj.weight", (kv * hd, h), f"{native}.wk.weight"),
               HfTensor(f"{hf}.v_proj.weight", (kv * hd, h), f"{native}.wv.weight"),
               HfTensor(f"{hf}.o_proj.weight", (h, heads * hd), f"{native}.wo.weight")]
        if model.qkv_bias:
            out += [HfTensor(f"{hf}.{p}_proj.bias", (n * hd,), f"{native}.w{p}.bias") for p, n in (("q", heads), ("k", kv), ("v", kv))]
        if model.qk_norm:
            out += [HfTensor(f"{hf}.{p}_norm.weight", (hd,), f"{native}.{p}_norm.weight") for p in ("q", "k")]
        return out
    mla = model.mla
    nope, rope, v, kv_rank = int(mla.qk_nope_head_dim), int(mla.qk_rope_head_dim), int(mla.v_head_dim), int(mla.kv_lora_rank)
    q_rope = RopeRows(nope + rope, nope, rope) if rope_interleave else None
    kv_rope = RopeRows(kv_rank + rope, kv_rank, rope) if rope_interleave else None
    if mla.q_lora_rank:
        q_rank = int(mla.q_lora_rank)
        out = [HfTensor(f"{hf}.q_a_proj.weight", (q_rank, h), f"{native}.wq_a.weight"),
               HfTensor(f"{hf}.q_a_layernorm.weight", (q_rank,), f"{native}.q_norm.weight"),
               HfTensor(f"{hf}.q_b_proj.weight", (heads * (nope + rope), q_rank), f"{native}.wq_b.weight", rope_rows=q_rope)]
    else:
        out = [HfTensor(f"{hf}.q_proj.weight", (heads * (nope + rope), h), f"{native}.wq.weight", rope_rows=q_rope)]
    return out + [
        HfTensor(f"{hf}.kv_a_proj_with_mqa.weight", (kv_rank + rope, h), f"{native}.wkv_a.weight", rope_rows=kv_rope),
        HfTensor(f"{hf}.kv_a_layernorm.weight", (kv_rank,), f"{native}.kv_norm.weight"),
        HfTensor(f"{hf}.kv_b_proj.weight", (heads * (nope + v), kv_rank), f"{native}.wkv_b.weight"),
        HfTensor(f"{hf}.o_proj.weight", (h, heads * v), f"{native}.wo.weight"),
    ]


def _swiglu(hf: str, native: str, hidden: int, ffn: int) -> list[HfTensor]:
    shapes = {"gate": (ffn, hidden), "up": (ffn, hidden), "down": (hidden, ffn)}
    return [HfTensor(f"{hf}.{part}_proj.weight", shapes[part], f"{native}.{w}.weight") for part, w in _SWIGLU]


def _moe(model: Any, layer: str, native: str) -> list[HfTensor]:
    prefix, expert_names = _MOE_NAMES.get(str(model.family), _DEFAULT_MOE_NAMES)
    moe, h = model.moe, int(model.hidden_size)
    hf, experts, f = f"{layer}.{prefix}", int(moe.num_experts), int(moe.ffn_hidden_size)
    out = [HfTensor(f"{hf}.gate.weight", (experts, h), f"{native}.router.weight")]
    if moe.router_enable_expert_bias:
        out.append(HfTensor(f"{hf}.gate.e_score_correction_bias", (experts,), f"{native}.expert_bias"))
    shapes = {"gate": (f, h), "up": (f, h), "down": (h, f)}
    for e in range(experts):
        out += [HfTensor(f"{hf}.experts.{e}.{expert_names[part]}.weight", shapes[part], f"{native}.{w}", expert=e)
                for part, w in _SWIGLU]
    if moe.shared_experts:
        out += _swiglu(f"{hf}.shared_experts", f"{native}.shared", h, shared_expert_ffn_hidden_size(model))
    return out


def hf_tensor_table(model: Any, rope_interleave: bool = False) -> list[HfTensor]:
    """Every tensor of `model`'s HF checkpoint, in HF's order of layers. `rope_interleave`: the HF config's (only
    MLA models have rope rows stored apart)."""
    h, vocab = int(model.hidden_size), int(model.vocab_size)
    table = [HfTensor("model.embed_tokens.weight", (vocab, h), "tok_embeddings.weight")]
    for i in range(int(model.num_layers)):
        layer, native = f"model.layers.{i}", f"layers.{i}"
        table += [HfTensor(f"{layer}.input_layernorm.weight", (h,), f"{native}.attention_norm.weight"),
                  HfTensor(f"{layer}.post_attention_layernorm.weight", (h,), f"{native}.ffn_norm.weight")]
        table += _attention(model, f"{layer}.self_attn", f"{native}.attention", rope_interleave)
        if is_moe_layer(model, i):
            table += _moe(model, layer, f"{native}.feed_forward")
        else:
            table += _swiglu(f"{layer}.mlp", f"{native}.feed_forward", h, int(model.ffn_hidden_size))
    table.append(HfTensor("model.norm.weight", (h,), "norm.weight"))
    if not model.tie_embeddings:
        table.append(HfTensor("lm_head.weight", (vocab, h), "output.weight"))
    return table


def native_shape(entries: list[HfTensor]) -> tuple[int, ...]:
    """The native parameter's shape from the HF tensors that fill it (all of one `native` name)."""
    first = entries[0]
    return (len(entries), *first.shape) if first.expert is not None else first.shape


def by_native_name(table: list[HfTensor]) -> dict[str, list[HfTensor]]:
    """The table grouped by native parameter; a stacked expert weight lists its experts in order."""
    grouped: dict[str, list[HfTensor]] = {}
    for entry in table:
        grouped.setdefault(entry.native, []).append(entry)
    for entries in grouped.values():
        entries.sort(key=lambda entry: entry.expert or 0)
    return grouped
