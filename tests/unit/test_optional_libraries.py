"""A finished run is never lost to an optional library: without tensorboard or matplotlib that output is turned
off with a warning before training, and a plot that fails at the end is a warning, not an error."""
from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("torch")

from primus_hydra.backends.common import metrics  # noqa: E402
from primus_hydra.backends.torch import patches  # noqa: E402
from primus_hydra.backends.torch.adapter import TorchAdapter  # noqa: E402
from primus_hydra.config.layout import parallel_layout  # noqa: E402
from primus_hydra.patches.registry import PatchContext  # noqa: E402


def torch_args(compose_config, tmp_path):
    cfg = compose_config("module.log.tensorboard=true", "module.log.plot=true")
    return cfg, TorchAdapter(cfg, parallel_layout(cfg, 1), tmp_path).convert_config()


@pytest.mark.parametrize("missing, off", [("tensorboard", "tensorboard"), ("matplotlib", "plot")])
def test_a_missing_optional_library_turns_its_output_off_with_a_warning(compose_config, tmp_path, monkeypatch, caplog,
                                                                        missing, off):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real_find_spec(name, *a))
    cfg, args = torch_args(compose_config, tmp_path)
    ctx = PatchContext(backend="torch", phase="build_args", backend_version=None, cfg=cfg, run_dir=tmp_path,
                       backend_args=args)
    with caplog.at_level(logging.WARNING):
        patches.logging_off_without_its_library(ctx)
    log = ctx.backend_args.module.log
    assert getattr(log, off) is False and all(getattr(log, key) for key in ("tensorboard", "plot") if key != off)
    assert args.module.log.tensorboard and args.module.log.plot  # the frozen arguments were replaced, not changed
    assert f"module.log.{off}=true but the {missing} package is missing: turned off" in caplog.text


def test_a_plot_that_fails_at_the_end_is_a_warning_and_the_metrics_stay(tmp_path, monkeypatch, caplog):
    def broken(*args):
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(metrics, "plot_loss_curve", broken)
    logger = metrics.MetricsLogger(tmp_path, enabled=True, tensorboard=False, log_interval=1, resuming=False)
    logger.log_step({"step": 1, "loss": 5.0, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1.0, "tflops": 0.1}, 1)
    with caplog.at_level(logging.WARNING):
        assert logger.close(plot=True) is None
    assert "no loss-curve plot: ImportError: No module named 'matplotlib'" in caplog.text
    assert [json.loads(line)["loss"] for line in Path(tmp_path / "metrics.jsonl").read_text().splitlines()] == [5.0]
