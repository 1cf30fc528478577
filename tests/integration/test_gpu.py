"""GPU paths of the native trainer (CUDA or ROCm builds of torch). They skip, saying why, on machines without one."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU: torch.cuda.is_available() is False here")


@needs_gpu
def test_bf16_training_on_the_gpu_with_a_peak_for_mfu(compose_config, tmp_path):
    from helpers.compose import run_job
    from primus_hydra.backends.common.metrics import read_metrics

    cfg = compose_config("platform.device=cuda", "module.precision=bf16", "module.train_iters=20", "module.warmup_iters=2",
                         "platform.peak_tflops_per_device=989.0", "module.log.progress_bar=false")
    run_job(cfg, tmp_path)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 20 and all(np.isfinite(r["loss"]) for r in records)
    assert records[-1]["loss"] < records[0]["loss"] and 0 < records[-1]["mfu"] < 1


@needs_gpu
def test_auto_device_picks_the_gpu():
    from primus_hydra.backends.common.distributed import resolve_device

    assert resolve_device("auto", local_rank=0).type == "cuda"


def test_asking_for_a_gpu_without_one_is_one_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from primus_hydra.backends.common.distributed import resolve_device
    from primus_hydra.errors import PrimusError

    with pytest.raises(PrimusError, match=r"platform.device=cuda but torch sees no GPU"):
        resolve_device("cuda", local_rank=0)


@needs_gpu
@pytest.mark.parametrize("micro_batch", [1, 2, 4])
def test_projection_matches_a_measured_gpu_run(tmp_path, micro_batch):
    """task=projection task.calibrate=true on the GPU: backend=torch, llama3 8B reduced to 4 layers, bf16; the
    projected peak (max_memory_allocated) and tokens/s next to the measured ones. The errors are printed (they
    calibrate the hardware entry); the bounds only catch a broken model."""
    import json

    from helpers.cli import primus

    result = primus("task=projection", "task.calibrate=true", "task.calibrate_steps=8", "platform.device=cuda",
                    "model=llama3_8b", "model.num_layers=4", "module.precision=bf16", "module.seq_length=2048",
                    f"module.micro_batch_size={micro_batch}", f"module.global_batch_size={micro_batch}",
                    "module.data.source=mock", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    calibration = json.loads(result.stdout)["calibration"]
    memory, tokens = calibration["peak_memory_gib"], calibration["tokens_per_s"]
    print(f"llama3 8B / 4 layers, micro batch {micro_batch}: peak GiB projected {memory['projected']:.2f} measured "
          f"{memory['measured']:.2f} ({100 * memory['error']:+.1f} %); tokens/s projected {tokens['projected']:,.0f} "
          f"measured {tokens['measured']:,.0f} ({100 * tokens['error']:+.1f} %)")
    assert abs(memory["error"]) < 0.5 and abs(tokens["error"]) < 1.0
