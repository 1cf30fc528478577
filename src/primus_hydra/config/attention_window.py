"""Which attention layers look through a sliding window (gpt-oss: every other one, from layer 0), and how many keys
a query of each is counted against. Pure Python, as model_math: `model` is anything with ModelConfig's attributes."""
from __future__ import annotations

from typing import Any


def is_sliding_window_layer(model: Any, layer: int) -> bool:
    """Whether attention layer `layer` (from 0) attends through model.sliding_window: all of them, or all but every
    full_attention_every-th (gpt-oss: 2, so layers 0, 2, 4, ... have the window)."""
    every = int(getattr(model, "full_attention_every", 0) or 0)
    return getattr(model, "sliding_window", None) is not None and not (every and (layer + 1) % every == 0)


def attended_keys(model: Any, layer: int, seq_length: int) -> int:
    """The keys a query of attention layer `layer` is counted against: the sequence, or the window of a
    sliding-window layer when that is shorter."""
    if is_sliding_window_layer(model, layer):
        return min(seq_length, int(model.sliding_window))
    return seq_length
