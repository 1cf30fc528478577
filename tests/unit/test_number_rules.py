"""Numbers out of range are one line each, before any other rule: a NaN passes every comparison, so it is named
as not finite instead of surfacing later as a NaN loss or silently disabled clipping."""
from __future__ import annotations

import pytest

from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare


@pytest.mark.parametrize("override, expected", [
    ("module.lr=nan", "module.lr=nan: must be a finite number"),
    ("module.min_lr=inf", "module.min_lr=inf: must be a finite number"),
    ("module.adam_eps=nan", "module.adam_eps=nan: must be a finite number"),
    ("module.weight_decay=-inf", "module.weight_decay=-inf: must be a finite number"),
    ("module.clip_grad=nan", "module.clip_grad=nan: must be a finite number"),
    ("model.norm_eps=nan", "model.norm_eps=nan: must be a finite number"),
    ("model.rope_theta=inf", "model.rope_theta=inf: must be a finite number"),
    ("model.rope_scaling.factor=nan", "model.rope_scaling.factor=nan: must be a finite number"),
    ("model.init_std=nan", "model.init_std=nan: must be a finite number"),
    ("platform.peak_tflops_per_device=inf", "platform.peak_tflops_per_device=inf: must be a finite number"),
    ("launch.timeout_s=nan", "launch.timeout_s=nan: must be a finite number"),
    ("launch.monitor_interval=inf", "launch.monitor_interval=inf: must be a finite number"),
    ("model.norm_eps=0", "model.norm_eps=0.0: must be > 0"),
    ("model.init_std=-0.02", "model.init_std=-0.02: must be > 0"),
    ("model.rope_theta=0", "model.rope_theta=0.0: must be > 0"),
    ("model.head_dim=0", "model.head_dim=0: must be >= 1 (or null)"),
    ("model.mla.kv_lora_rank=0", "model.mla.kv_lora_rank=0: must be >= 1"),
    ("backend.num_threads=0", "backend.num_threads=0: must be >= 1 (or null)"),
    ("module.exit_interval=-1", "module.exit_interval=-1: must be >= 0"),
    ("module.seed=-1", "module.seed=-1: must be in [0, 2^63)"),
    ("module.seed=9223372036854775808", "module.seed=9223372036854775808: must be in [0, 2^63)"),
    ("model.moe.aux_loss_coeff=-1", "model.moe.aux_loss_coeff=-1.0: must be >= 0"),
])
def test_a_number_out_of_range_is_one_line(compose_config, override, expected):
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config(override, "task=plan"))
    assert info.value.failures == [expected]


def test_a_value_derived_from_a_bad_one_is_not_reported_twice(compose_config):
    """module.min_lr follows module.lr (10 %): a NaN lr is one line, not two."""
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config("module.lr=nan", "task=plan"))
    assert info.value.failures == ["module.lr=nan: must be a finite number"]


@pytest.mark.parametrize("variable, value, expected", [
    ("OMP_NUM_THREADS", "abc", "OMP_NUM_THREADS=abc: must be an integer >= 1 (threads per process), or unset for the plan's"),
    ("MKL_NUM_THREADS", "0", "MKL_NUM_THREADS=0: must be an integer >= 1 (threads per process), or unset for the plan's"),
    ("PRIMUS_PATCHES", " ", "PRIMUS_PATCHES=' ' names no patch; allowed: all, none, or a comma-separated list of patch "
                            "ids (unset it to use patches.enabled)"),
    ("PRIMUS_PATCHES", ",", "PRIMUS_PATCHES=',' names no patch; allowed: all, none, or a comma-separated list of patch "
                            "ids (unset it to use patches.enabled)"),
])
def test_a_variable_that_would_be_ignored_or_disable_everything_is_refused(compose_config, monkeypatch, variable,
                                                                           value, expected):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config())
    assert expected in info.value.failures


def test_a_master_address_that_does_not_resolve(compose_config):
    with pytest.raises(ConfigValidationError) as info:
        prepare(compose_config("launch.nproc_per_node=2", "module.global_batch_size=16",
                               "launch.master_addr=no-such-host.invalid"))
    (line,) = info.value.failures
    assert line.startswith("launch.master_addr=no-such-host.invalid does not resolve on this machine (gaierror: ")
