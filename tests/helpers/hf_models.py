"""Tiny random Hugging Face models for tests, built by `transformers` itself and saved with `save_pretrained`.

Every builder takes a folder, makes the model under a fixed seed (so two calls give the same weights) and
returns that folder. Vocab 256, so byte-level text fits. Nothing is downloaded.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from primus_hydra.backends.base import module_findable

needs_transformers = pytest.mark.skipif(not (module_findable("transformers", []) and module_findable("safetensors", [])),
                                        reason="transformers or safetensors is not installed (pip install 'primus-hydra[hf]')")

VOCAB = 256
SEED = 1234
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
               max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None,
               pad_token_id=None)


def _save(config, folder: Path | str, max_shard_size: str | None = None) -> Path:
    import torch
    import transformers

    folder = Path(folder)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # random norms and biases too, so a name mix-up cannot hide behind all-ones weights
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(0.01 * torch.randn_like(buffer))
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(folder, **kwargs)
    return folder


def llama(folder, tied: bool = False, max_shard_size: str | None = None) -> Path:
    """Llama with GQA (4 query heads, 2 kv heads); `tied` shares the embedding with the output layer."""
    from transformers import LlamaConfig

    config = LlamaConfig(**_COMMON, num_key_value_heads=2, intermediate_size=128, tie_word_embeddings=tied,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return _save(config, folder, max_shard_size)


def llama_sharded(folder) -> Path:
    """The untied Llama saved in several safetensors files with model.safetensors.index.json."""
    return llama(folder, max_shard_size="50KB")


def qwen3_moe(folder) -> Path:
    """Qwen3-MoE: per-head q/k RMSNorm, 8 experts top-2, softmax routing without renormalisation."""
    from transformers import Qwen3MoeConfig

    config = Qwen3MoeConfig(**_COMMON, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                            moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False,
                            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return _save(config, folder)


def mixtral(folder) -> Path:
    """Mixtral: 4 experts top-2, softmax routing renormalised over the chosen two."""
    from transformers import MixtralConfig

    config = MixtralConfig(**_COMMON, num_key_value_heads=2, intermediate_size=96, num_local_experts=4,
                           num_experts_per_tok=2, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return _save(config, folder)


def deepseek_v3(folder) -> Path:
    """DeepSeek-V3: MLA with a low-rank query, sigmoid group-limited routing with e_score_correction_bias, one
    dense first layer, one shared expert; rope_interleave as published."""
    from transformers import DeepseekV3Config

    common = dict(_COMMON, num_hidden_layers=3, rms_norm_eps=1e-6)  # HF's q_a/kv_a norms always use 1e-6
    config = DeepseekV3Config(**common, num_key_value_heads=4, intermediate_size=96, moe_intermediate_size=32,
                              n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                              routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
                              q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                              rope_interleave=True, tie_word_embeddings=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return _save(config, folder)


BUILDERS = {"llama": llama, "llama_tied": lambda folder: llama(folder, tied=True), "llama_sharded": llama_sharded,
            "qwen3_moe": qwen3_moe, "mixtral": mixtral, "deepseek_v3": deepseek_v3}


# -- damaged folders: what check_hf_folder must name in one line ------------------------------------------------
def _rewrite_tensor(file, name, dtype=None, shape=None):
    """Rewrite one tensor's header entry (its bytes stay): another dtype or shape, the same data."""
    raw = file.read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + length])
    header[name].update({k: v for k, v in (("dtype", dtype), ("shape", shape)) if v is not None})
    text = json.dumps(header, separators=(",", ":")).encode()
    text = text.ljust(-(-len(text) // 8) * 8)
    file.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length:])


# what is done to a copy of llama_sharded, and a piece of the one line check_hf_folder gives for it
FOLDER_DEFECTS = {
    "no config.json": (lambda f: (f / "config.json").unlink(), "no config.json"),
    "truncated shard": (lambda f: f.joinpath("model-00002-of-00010.safetensors").write_bytes(
        f.joinpath("model-00002-of-00010.safetensors").read_bytes()[:-100]), "(truncated)"),
    "missing shard": (lambda f: f.joinpath("model-00003-of-00010.safetensors").unlink(), "not there"),
    "index names another file": (lambda f: f.joinpath("model.safetensors.index.json").write_text(
        f.joinpath("model.safetensors.index.json").read_text().replace("model-00004-of-00010", "model-00099-of-00010")),
        "not there"),
    "wrong shape": (lambda f: _rewrite_tensor(next(p for p in f.glob("*.safetensors") if b"model.norm.weight" in p.read_bytes()),
                                               "model.norm.weight", shape=[32, 2]), "needs [64]"),
    "integer dtype": (lambda f: _rewrite_tensor(next(p for p in f.glob("*.safetensors") if b"model.norm.weight" in p.read_bytes()),
                                                 "model.norm.weight", dtype="I32"), "I32"),
    "other architecture": (lambda f: f.joinpath("config.json").write_text(
        f.joinpath("config.json").read_text().replace('"hidden_size": 64', '"hidden_size": 32')), "hidden_size=32"),
}


def damage(folder: Path, defect: str) -> str:
    """Do `defect` to a copy of the llama_sharded folder; the words its one failure line holds."""
    action, expected = FOLDER_DEFECTS[defect]
    action(folder)
    return expected


class BuiltOnDemand(dict):
    """{family: folder}, each model built under `root` the first time a test asks for it."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = Path(root)

    def __missing__(self, family: str) -> Path:
        self[family] = BUILDERS[family](self.root / family)
        return self[family]


# -- what task=export writes back ----------------------------------------------------------------------------------
def hf_tensors(folder: Path) -> dict:
    """Every tensor of the folder's safetensors files, by its Hugging Face name."""
    from safetensors import safe_open

    tensors = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
    return tensors


def assert_exports_the_tensors_of(folder: Path, run_dir: Path, out: Path, moved: tuple[str, ...] = ()) -> None:
    """task=export of the run (fp32, in this process) gives the folder's tensors: the same names and shapes, values
    within 1e-6, but for names ending in one of `moved` (what the run changed on purpose)."""
    from helpers.compose import compose_primus
    from primus_hydra.tasks.export import ExportTask, export_hf

    export_hf(ExportTask.prepare_job(compose_primus("task=export", f"task.checkpoint={run_dir}", "task.format=hf",
                                                    f"task.out={out}", "task.dtype=fp32"), None))
    original, exported = hf_tensors(folder), hf_tensors(out)
    assert sorted(exported) == sorted(original)
    assert all(exported[name].shape == original[name].shape for name in original)
    kept = [name for name in original if not name.endswith(moved)]
    assert max((exported[name] - original[name]).abs().max().item() for name in kept) <= 1e-6


def transformers_greedy(folder, prompt: list[int], new_tokens: int):
    """transformers' own greedy decoding (KV cache on): the new tokens and each step's raw logits."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[0, len(prompt):].tolist(), [logits[0].float() for logits in out.logits]


def generate_prepared(*overrides: str):
    """task=generate's prepared job for these overrides, in this process."""
    from helpers.compose import compose_primus
    from primus_hydra.tasks.generate import GenerateTask

    return GenerateTask.prepare_job(compose_primus("task=generate", *overrides), None)
