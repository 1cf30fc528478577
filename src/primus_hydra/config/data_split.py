"""module.data.split, Megatron's `--split` ("969,30,1": train, valid, test weights): the share of the data each part
gets. With evaluation on (module.eval_interval), training reads the train share and evaluation the valid share;
the test share is left unused, as Megatron leaves it to a separate test pass."""
from __future__ import annotations

from typing import Optional


def split_fractions(text: str) -> tuple[float, float]:
    """(train, valid) fractions of the data; ValueError with what is wrong."""
    parts = [part.strip() for part in str(text).replace("/", ",").split(",")]
    if not 2 <= len(parts) <= 3:
        raise ValueError("give 2 or 3 comma-separated weights: train,valid[,test]")
    try:
        weights = [float(part) for part in parts]
    except ValueError:
        raise ValueError("give 2 or 3 comma-separated weights: train,valid[,test]") from None
    if any(weight < 0 or weight != weight for weight in weights) or sum(weights) <= 0:
        raise ValueError("weights must be >= 0 with a positive sum")
    total = sum(weights)
    return weights[0] / total, weights[1] / total


def split_failure(text: str, evaluates: bool) -> Optional[str]:
    """One line when module.data.split cannot be used (with evaluation on: it must give both training and
    evaluation a share)."""
    try:
        train, valid = split_fractions(text)
    except ValueError as error:
        return f"module.data.split={text}: {error}"
    if evaluates and (train <= 0 or valid <= 0):
        return (f"module.data.split={text}: module.eval_interval evaluates on the valid share and trains on the train "
                f"share; both must be > 0 (e.g. 98,2,0)")
    return None
