"""Loss curves a run wrote (metrics.jsonl) and comparing them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

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


def trained_once(make_dir: Callable[[str], Path], train: Callable[[Path, str], None]) -> Callable[[str], Path]:
    """name -> its run dir (made by `make_dir`), trained by `train(run_dir, name)` the first time it is asked for:
    a module fixture's runs that several tests read."""
    runs: dict[str, Path] = {}

    def run_dir(name: str) -> Path:
        if name not in runs:
            runs[name] = make_dir(name)
            train(runs[name], name)
        return runs[name]

    return run_dir
