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


def layer_kinds(model: Any, layers: int) -> list[tuple[int, int]]:
    """(a representative layer, how many of attention layers 0..layers-1 are like it): the window layers and the
    full-attention layers, at most two kinds, each of one shape and one count of attended keys, so that a count over
    the layers costs two layers' reads, not one per layer."""
    if getattr(model, "sliding_window", None) is None:
        return [(0, layers)]
    every = int(getattr(model, "full_attention_every", 0) or 0)
    full = layers // every if every else 0
    kinds = [(0, layers - full)] if layers - full else []  # layer 0 has the window unless every layer is full
    return kinds + ([(every - 1, full)] if full else [])
