"""Loss curves a run wrote (metrics.jsonl) and comparing them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def losses(run_dir: Path) -> dict[int, float]:
    """step -> loss; a step logged twice (a restarted attempt) counts as its last record."""
    records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records}


def eval_losses(run_dir: Path) -> dict[int, float]:
    """step -> held-out loss of the steps the run evaluated after (module.eval_interval)."""
    records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["eval_loss"] for r in records if r.get("eval_loss") is not None}


def assert_same_curve(actual: dict[int, float], expected: dict[int, float], rel: float = 1e-4) -> None:
    assert list(actual) == list(expected)
    for step, loss in expected.items():
        assert actual[step] == pytest.approx(loss, rel=rel), f"step {step}: {actual[step]} vs {loss}"
