"""Decoding speed of task=generate (the native model with its KV cache, backends/torch/generation.py) against
transformers' greedy `generate` (its own KV cache), on the same weights, prompt length and number of new tokens.

    .venv/bin/python scripts/bench/bench_generate.py [--models tiny,500m] [--prompt-len 32] [--new-tokens 32]

Each model is built on the meta device and given random weights in memory (nothing on disk): the native model
first, then the Hugging Face model of the same config (config/hf_config.py) filled through the HF <-> native
tensor table (backends/common/hf_names.py). Tokens/s = new tokens / wall time of one whole generation (prefill
included), the median of --repeats (the two alternating) after one warm-up; both must pick the same tokens.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from primus_hydra.backends.common.hf_names import hf_tensor_table
from primus_hydra.backends.torch.generation import generate
from primus_hydra.backends.torch.model import build_model_on_meta, materialize
from primus_hydra.config.hf_config import hf_config_for
from primus_hydra.tasks.checkpoint_source import model_object

LLAMA = {"family": "llama", "rope_theta": 10000.0, "norm_eps": 1e-5, "tie_embeddings": False,
         "max_position_embeddings": 2048}
MODELS = {
    # the zoo's llama_tiny (3.0 M parameters, byte-level vocabulary)
    "tiny": {**LLAMA, "name": "llama_tiny", "hidden_size": 256, "num_layers": 4, "num_attention_heads": 8,
             "num_kv_heads": 4, "ffn_hidden_size": 688, "vocab_size": 256},
    # a Llama of ~0.5 B parameters (GQA 12/4 heads, 32 k vocabulary)
    "500m": {**LLAMA, "name": "llama_500m", "hidden_size": 1536, "num_layers": 16, "num_attention_heads": 12,
             "num_kv_heads": 4, "ffn_hidden_size": 4096, "vocab_size": 32000},
}


def native_and_hf_models(fields: dict):
    import transformers

    model_cfg = model_object(fields)
    native = materialize(build_model_on_meta(model_cfg), torch.device("cpu"), seed=0).eval()
    hf_config = dict(hf_config_for(model_cfg))
    config = transformers.AutoConfig.for_model(hf_config.pop("model_type"), **hf_config)
    with torch.device("meta"):
        hf_model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    weights = dict(native.state_dict())
    hf_weights = {entry.hf_name: weights[entry.native] for entry in hf_tensor_table(model_cfg)}
    hf_model.load_state_dict(hf_weights, strict=True, assign=True)
    hf_model.model.rotary_emb = type(hf_model.model.rotary_emb)(config=config)  # its buffers, off the meta device
    return native, hf_model.eval()


def median_seconds(runs: dict, repeats: int) -> dict[str, tuple[float, list[int]]]:
    """Each run's median wall time and its tokens; the runs alternate, so that a neighbour's load on a shared
    machine falls on both alike."""
    tokens = {name: run() for name, run in runs.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            tokens[name] = run()
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(times[name]), tokens[name]) for name in runs}


def bench(name: str, prompt_len: int, new_tokens: int, repeats: int) -> dict:
    native, hf_model = native_and_hf_models(MODELS[name])
    prompt = torch.randint(0, native.args.vocab_size, (prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()

    def ours() -> list[int]:
        return generate(native, prompt, new_tokens).tokens

    @torch.inference_mode()
    def theirs() -> list[int]:
        out = hf_model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                do_sample=False, use_cache=True, pad_token_id=0)
        return out[0, prompt_len:].tolist()

    measured = median_seconds({"ours": ours, "theirs": theirs}, repeats)
    (ours_s, our_tokens), (theirs_s, their_tokens) = measured["ours"], measured["theirs"]
    return {"model": name, "parameters": sum(p.numel() for p in native.parameters()), "prompt_len": prompt_len,
            "new_tokens": new_tokens, "threads": torch.get_num_threads(),
            "task_generate_tok_s": round(new_tokens / ours_s, 1), "transformers_tok_s": round(new_tokens / theirs_s, 1),
            "ratio": round(theirs_s / ours_s, 3), "same_tokens": our_tokens == their_tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,500m")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name in args.models.split(","):
        print(json.dumps(bench(name, args.prompt_len, args.new_tokens, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
