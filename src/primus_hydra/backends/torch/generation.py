"""Decoding with the native model: the prompt fills a KVCache in one forward pass, then each step feeds the one
token chosen last. Greedy when temperature is 0; else the temperature-scaled distribution cut to its top-p nucleus,
drawn from a torch.Generator seeded by the caller, so that the same seed gives the same tokens."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import torch

from primus_hydra.backends.torch.model import KVCache, Transformer


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy (the most likely token)
    top_p: float = 1.0  # keep the most likely tokens whose probabilities add up to top_p
    seed: int = 0


@dataclass
class Generation:
    prompt_tokens: list[int]
    tokens: list[int]  # the generated tokens, after the prompt
    logits: list[torch.Tensor] = field(default_factory=list)  # per generated token, fp32 (vocab,), when kept
    stopped_at_eos: bool = False


def choose_token(logits: torch.Tensor, sampling: Sampling, generator: Optional[torch.Generator]) -> int:
    """The next token from one position's logits (vocab,)."""
    if sampling.temperature <= 0:
        return int(logits.argmax())
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        before = sorted_probs.cumsum(0) - sorted_probs  # the mass of the more likely tokens
        sorted_probs = sorted_probs.masked_fill(before >= sampling.top_p, 0.0)  # the first token always stays
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.inference_mode()
def generate(model: Transformer, prompt_tokens: list[int], max_new_tokens: int, sampling: Sampling = Sampling(),
             eos_token_ids: Iterable[int] = (), keep_logits: bool = False) -> Generation:
    """Up to max_new_tokens tokens after `prompt_tokens` (stopping after an end-of-sequence token)."""
    model.eval()
    device = model.tok_embeddings.weight.device
    generator = torch.Generator(device=device).manual_seed(sampling.seed) if sampling.temperature > 0 else None
    eos = set(eos_token_ids)
    result = Generation(prompt_tokens=list(prompt_tokens), tokens=[])
    cache = KVCache()
    inputs = torch.tensor([prompt_tokens], dtype=torch.long, device=device)
    for _ in range(max_new_tokens):
        logits = model(inputs, cache=cache)[0, -1].float()
        if keep_logits:
            result.logits.append(logits.cpu())
        token = choose_token(logits, sampling, generator)
        result.tokens.append(token)
        if token in eos:
            result.stopped_at_eos = True
            break
        inputs = torch.tensor([[token]], dtype=torch.long, device=device)
    return result
