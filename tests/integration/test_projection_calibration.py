"""The projection against measurements on this CPU (backend=torch, the cpu hardware entry calibrated by a fresh
matmul-peak and op-dispatch measurement): each rank's projected peak memory within 15 % of the torch profiler's
measured peak, for dense and MoE models, micro batches 2 and 8, over the dp (MoE), FSDP2 and tp layouts, and the
tokens/s record the projection's own (measured from the run's timed steps, its error computed from both).

How close projected tokens/s come to measured ones is a benchmark, not a test: a shared machine's speed moves by
half between the calibration's matmul and the run's steps at times (CI of 2026-12-06: tp2 measured 466 tokens/s
five times in a row against 1,075 projected; a quiet host measures ~3,000). `scripts/calibration/projection_cpu.py
--check` runs 16 cases and fails on a miss over 25 %; docs/projection.md keeps its table."""
from __future__ import annotations

import json

import pytest

from helpers.cli import primus

CASES = {
    "llama_tiny fsdp2 mb8": ["launch.nproc_per_node=2", "module.parallel.fsdp=true", "module.global_batch_size=16"],
    "llama_tiny tp2 mb2": ["launch.nproc_per_node=2", "module.parallel.tp=2", "module.micro_batch_size=2",
                           "module.global_batch_size=2"],
    # one of the fitted cases (docs/projection.md); at mb4 the projection ran 15-27 % under the measured tokens/s on
    # 2026-12-05 (mb8: 17-19 %), the edge of the tolerance
    "moe_tiny dp2 mb8": ["model=moe_tiny", "launch.nproc_per_node=2", "module.micro_batch_size=8",
                         "module.global_batch_size=16"],
}
MEMORY_TOLERANCE = 0.15
# two-rank runs measured by the profiler: run alone, not beside other tiers (a loaded machine lets gloo's buffers
# overlap a backward they usually follow; tests/integration/conftest.py)
pytestmark = pytest.mark.timing


# one intra-op thread per rank, whatever the machine gives the test: with two, a MoE rank's peak grows by ~27 MiB
# of per-thread scratch the projection does not model (0.232 GiB against 0.209, moe_tiny dp2 mb4)
ONE_THREAD = "backend.num_threads=1"


def calibrate(tmp_path, overrides: list[str]) -> dict:
    result = primus("task=projection", "hardware=cpu", "task.calibrate=true", "task.calibrate_steps=5", ONE_THREAD,
                    *overrides, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def memory_misses(memory: dict) -> list[float]:
    """The ranks whose measured peak is further than MEMORY_TOLERANCE from the projection (every rank of these
    layouts holds the same share)."""
    return [measured for measured in memory["measured_per_rank"]
            if abs(memory["projected"] / measured - 1) > MEMORY_TOLERANCE]


@pytest.mark.parametrize("case", list(CASES))
def test_projection_matches_the_measured_run(tmp_path, case):
    data = calibrate(tmp_path, CASES[case])
    memory, tokens = data["calibration"]["peak_memory_gib"], data["calibration"]["tokens_per_s"]
    assert len(memory["measured_per_rank"]) == data["layout"]["world_size"]
    if memory_misses(memory):  # on a loaded machine, gloo's buffers may overlap a backward they usually follow
        memory = calibrate(tmp_path, CASES[case])["calibration"]["peak_memory_gib"]
    assert not memory_misses(memory), memory
    assert tokens["measured"] > 0 and tokens["projected"] > 0, tokens
    assert tokens["error"] == pytest.approx(tokens["projected"] / tokens["measured"] - 1, abs=1e-3), tokens
    assert list(tmp_path.iterdir()) == []  # the calibration run's folder is gone
