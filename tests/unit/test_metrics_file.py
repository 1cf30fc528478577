"""metrics.jsonl keeps one record per step: a resumed or requeued run drops the records of the steps it redoes (and
a torn last line) in one atomic rewrite before it logs again."""
from __future__ import annotations

import json

from primus_hydra.backends.common.metrics import MetricsLogger, keep_records_before


def write(path, steps, torn: bool = False) -> None:
    text = "".join(json.dumps({"step": step, "loss": 1.0 / step}) + "\n" for step in steps)
    path.write_text(text + ('{"step": 9, "lo' if torn else ""))


def steps_in(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_the_steps_a_rerun_redoes_and_a_torn_line_are_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write(path, range(1, 9), torn=True)
    keep_records_before(path, 5)
    assert steps_in(path) == [1, 2, 3, 4]
    assert not list(tmp_path.glob(".*.tmp"))  # renamed into place


def test_a_resumed_logger_continues_the_file_from_its_first_step(tmp_path):
    write(tmp_path / "metrics.jsonl", range(1, 8))  # steps 5..7 were logged after the step-4 checkpoint
    logger = MetricsLogger(tmp_path, enabled=True, tensorboard=False, log_interval=100, resuming=True)
    for step in (5, 6):
        logger.log_step({"step": step, "loss": 0.5, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1.0,
                         "tflops": 0.0}, total_steps=6)
    logger.close(plot=False)
    assert steps_in(tmp_path / "metrics.jsonl") == [1, 2, 3, 4, 5, 6]
