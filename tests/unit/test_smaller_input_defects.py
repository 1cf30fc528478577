"""The smaller defects of issue 23 (§9), one class each: a value derived from another is reported by the key the
user typed; the CPU matmul peak cache keeps no measurement taken under load and MFU is never clamped; a query
(task=status, task=plan) makes no run dir; the Python API's errors are PrimusErrors of one line and its run dir a
value."""
from __future__ import annotations

import json
import logging
import re

import pytest

import primus_hydra
from primus_hydra import errors
from primus_hydra.backends import cpu_peak_cache
from primus_hydra.config.derived_values import typed_sources, with_typed_sources
from primus_hydra.config.validate import validate_config
from primus_hydra.config.values import without_hydra_node
from primus_hydra.errors import ConfigValidationError, PrimusError
from primus_hydra.tasks.callback import stay_in_working_dir_if_query
from primus_hydra.tasks.status import StatusTask


def failures_of(compose_config, *overrides: str) -> list[str]:
    with pytest.raises(ConfigValidationError) as raised:
        validate_config(compose_config(*overrides))
    return raised.value.failures


# ---- a derived value's error names the key the user typed ----------------------------------------------------------

def test_a_negative_lr_is_reported_as_the_lr_not_as_the_min_lr_derived_from_it(compose_config):
    assert failures_of(compose_config, "module.lr=-1") == ["module.lr=-1.0: must be > 0"]


def test_a_zero_lr_is_reported_as_the_lr(compose_config):
    assert failures_of(compose_config, "module.lr=0") == ["module.lr=0.0: must be > 0"]


def test_a_value_derived_from_a_failing_key_adds_no_second_line(compose_config):
    failures = failures_of(compose_config, "module.global_batch_size=${module.micro_batch_size}",
                           "module.micro_batch_size=0")
    assert failures == ["module.micro_batch_size=0: must be >= 1"]


def test_a_failing_value_derived_from_a_sound_key_names_that_key_and_how(compose_config):
    failures = failures_of(compose_config, "module.clip_grad='${primus.times:${module.lr},-1}'")
    assert failures == ["module.clip_grad=-0.003: must be >= 0; module.clip_grad is derived from module.lr=0.003 as "
                        "${primus.times:${module.lr},-1}: change module.lr, or set module.clip_grad itself"]


def test_a_cross_field_rule_on_a_derived_value_names_its_source(compose_config):
    failures = failures_of(compose_config, "module.min_lr=${module.weight_decay}", "module.weight_decay=2")
    assert failures == ["module.lr=0.003 is below module.min_lr=2.0; lr must be >= min_lr; module.min_lr is derived "
                        "from module.weight_decay=2.0 as ${module.weight_decay}: change module.weight_decay, or set "
                        "module.min_lr itself"]


def test_a_relative_interpolation_is_followed_to_the_sibling_it_reads(compose_config):
    assert typed_sources(compose_config("module.lr=0.5"), "module.min_lr") == [("module.lr", 0.5)]


def test_a_chain_of_interpolations_is_followed_to_the_typed_value(compose_config):
    cfg = compose_config("module.weight_decay=${module.min_lr}", "module.lr=0.5")
    assert typed_sources(cfg, "module.weight_decay") == [("module.lr", 0.5)]


def test_a_typed_value_has_no_sources(compose_config):
    assert typed_sources(compose_config("module.min_lr=0.1"), "module.min_lr") == []


def test_a_line_about_typed_keys_only_is_kept_as_it_is(compose_config):
    line = "module.parallel.tp=3 does not divide model.num_attention_heads=4"
    assert with_typed_sources(compose_config(), [line]) == [line]


# ---- the CPU matmul peak cache keeps no measurement taken under load -------------------------------------------------

@pytest.fixture
def peak_cache(tmp_path, monkeypatch):
    path = tmp_path / "cpu_matmul_peak.json"
    monkeypatch.setattr(cpu_peak_cache, "PEAK_CACHE", path)
    return path


def test_a_peak_of_more_threads_below_one_of_fewer_threads_is_not_kept(peak_cache):
    cpu_peak_cache.store_peak(1, "torch.float32", 2.0)

    assert cpu_peak_cache.store_peak(2, "torch.float32", 1.5) is False
    assert cpu_peak_cache.cached_peak(2, "torch.float32") is None


def test_a_peak_of_fewer_threads_above_those_of_more_threads_drops_them(peak_cache):
    cpu_peak_cache.store_peak(2, "torch.float32", 1.5)
    cpu_peak_cache.store_peak(4, "torch.float32", 1.8)

    cpu_peak_cache.store_peak(1, "torch.float32", 1.6)

    assert json.loads(peak_cache.read_text()) == {cpu_peak_cache.cache_key(1, "torch.float32"): 1.6,
                                                  cpu_peak_cache.cache_key(4, "torch.float32"): 1.8}


def test_an_inconsistent_entry_an_older_version_wrote_is_measured_again(peak_cache):
    peak_cache.write_text(json.dumps({cpu_peak_cache.cache_key(1, "torch.float32"): 2.0,
                                      cpu_peak_cache.cache_key(2, "torch.float32"): 1.5}))

    assert cpu_peak_cache.cached_peak(2, "torch.float32") is None
    assert cpu_peak_cache.cached_peak(1, "torch.float32") == 2.0


def test_a_peak_keeps_the_best_value_its_key_has_seen(peak_cache):
    cpu_peak_cache.store_peak(2, "torch.float32", 2.0)
    cpu_peak_cache.store_peak(2, "torch.float32", 1.0)

    assert cpu_peak_cache.cached_peak(2, "torch.float32") == 2.0


def test_peaks_of_other_dtypes_are_another_series(peak_cache):
    cpu_peak_cache.store_peak(1, "torch.float32", 2.0)

    assert cpu_peak_cache.store_peak(2, "torch.bfloat16", 0.5) is True
    assert cpu_peak_cache.cached_peak(2, "torch.bfloat16") == 0.5


def test_a_measurement_that_is_not_a_peak_is_kept_as_measured(peak_cache):
    cpu_peak_cache.store_peak(1, "op_dispatch_us", 9.0)
    cpu_peak_cache.store_peak(2, "op_dispatch_us", 4.0)
    cpu_peak_cache.store_peak(2, "op_dispatch_us", 5.0)

    assert cpu_peak_cache.cached_peak(2, "op_dispatch_us") == 5.0


def test_a_cache_file_that_is_not_a_mapping_reads_as_empty(peak_cache):
    peak_cache.write_text("[1, 2]")
    assert cpu_peak_cache.cached_peak(1, "torch.float32") is None


# ---- MFU is never clamped to the measured baseline ------------------------------------------------------------------

@pytest.fixture
def remeasured(monkeypatch):
    """The peak a fresh measurement gives (set by the test), and how often it was asked for."""
    from primus_hydra.backends.common import metrics

    asked: list[dict] = []
    state = {"peak": 0.0, "asked": asked}

    def measure(dtype, *, fresh=False, windows=1):
        asked.append({"fresh": fresh, "windows": windows})
        return state["peak"]

    monkeypatch.setattr(metrics, "cpu_matmul_peak_tflops", measure)
    return state


def measured_baseline(tflops: float, remeasure: bool = True):
    import torch

    from primus_hydra.backends.common.metrics import MfuBaseline

    return MfuBaseline(tflops, measured_dtype=torch.float32, remeasure=remeasure)


def test_a_step_that_beats_a_measured_peak_has_it_measured_again_and_reads_against_it(remeasured):
    remeasured["peak"] = 2.0
    baseline = measured_baseline(1.0)

    assert baseline.mfu(1.5, step=1) == 0.75
    assert remeasured["asked"] == [{"fresh": True, "windows": 4}]


def test_a_step_that_still_beats_the_measured_peak_reads_above_100_percent_and_says_the_baseline_is_stale(
        remeasured, caplog):
    remeasured["peak"] = 1.2
    baseline = measured_baseline(1.0)

    with caplog.at_level(logging.WARNING, logger="primus_hydra.train"):
        assert baseline.mfu(1.5, step=3) == 1.25
        assert baseline.mfu(1.8, step=4) == 1.5
    assert [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING] == [
        "MFU baseline is stale: step 3 ran 1.500 TFLOP/s per rank, above this CPU's measured matmul peak 1.200 "
        "TFLOP/s, so MFU reads above 100 %; set platform.peak_tflops_per_device for a fixed baseline"]
    assert len(remeasured["asked"]) == 1


def test_a_measurement_lower_than_the_baseline_does_not_lower_it(remeasured):
    remeasured["peak"] = 0.5
    assert measured_baseline(1.0).mfu(1.5, step=1) == 1.5


def test_a_rank_that_does_not_log_never_measures_again(remeasured):
    assert measured_baseline(1.0, remeasure=False).mfu(1.5, step=1) == 1.5
    assert remeasured["asked"] == []


def test_a_fixed_peak_is_never_measured_again(remeasured):
    from primus_hydra.backends.common.metrics import MfuBaseline

    assert MfuBaseline(1.0, remeasure=True).mfu(2.0, step=1) == 2.0
    assert remeasured["asked"] == []


def test_without_a_peak_there_is_no_mfu(remeasured):
    from primus_hydra.backends.common.metrics import MfuBaseline

    assert MfuBaseline(None).mfu(2.0, step=1) is None


# ---- a query writes nothing ----------------------------------------------------------------------------------------

def test_a_query_runs_in_the_working_dir_whatever_run_dir_it_is_given():
    cfg = primus_hydra.compose(["task=status", "hydra.run.dir=somewhere"])

    stay_in_working_dir_if_query(cfg)

    assert (cfg.hydra.run.dir, cfg.hydra.output_subdir) == (".", None)


def test_task_plan_is_a_query_too():
    cfg = primus_hydra.compose(["task=plan", "hydra.run.dir=somewhere"])

    stay_in_working_dir_if_query(cfg)

    assert cfg.hydra.run.dir == "."


def test_a_training_run_keeps_its_run_dir():
    cfg = primus_hydra.compose(["hydra.run.dir=somewhere"])

    stay_in_working_dir_if_query(cfg)

    assert (cfg.hydra.run.dir, cfg.hydra.output_subdir) == ("somewhere", ".hydra")


def test_a_status_query_of_a_missing_folder_is_refused_before_it_runs(tmp_path):
    cfg = primus_hydra.compose(["task=status", f"task.runs={tmp_path / 'nope'}"])

    with pytest.raises(PrimusError) as raised:
        StatusTask.prepare_job(cfg, None)
    assert str(raised.value) == f"task.runs={tmp_path / 'nope'}: no such directory; give a run or sweep dir"


def test_a_status_query_run_through_the_api_with_a_run_dir_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    assert primus_hydra.run(primus_hydra.compose(["task=status", f"task.runs={tmp_path}"]), tmp_path / "run") == []

    assert capsys.readouterr().out == f"no submitted runs under {tmp_path}\n"
    assert list(tmp_path.iterdir()) == []


# ---- the Python API ------------------------------------------------------------------------------------------------

def test_the_package_exports_the_errors_it_raises():
    assert (primus_hydra.PrimusError, primus_hydra.ConfigValidationError) == (errors.PrimusError,
                                                                             errors.ConfigValidationError)


@pytest.mark.parametrize("overrides, expected", [
    ([None], "overrides[0]=None (NoneType): overrides must be strings such as 'module.lr=1e-3'"),
    (["model=moe_tiny", 3], "overrides[1]=3 (int): overrides must be strings such as 'module.lr=1e-3'"),
    (5, "overrides=5: must be a list of strings such as ['module.lr=1e-3']"),
])
def test_overrides_that_are_not_strings_are_one_primus_error_line(overrides, expected):
    with pytest.raises(PrimusError) as raised:
        primus_hydra.compose(overrides)
    assert str(raised.value) == expected


def test_the_composed_run_dir_is_a_value(monkeypatch):
    monkeypatch.delenv("PRIMUS_OUTPUT_ROOT", raising=False)
    run_dir = primus_hydra.compose(["model=moe_tiny"]).hydra.run.dir

    assert re.fullmatch(r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d\.\d{6}_moe_tiny", run_dir), run_dir


def test_a_run_dir_that_reads_hydras_job_config_is_a_value():
    cfg = primus_hydra.compose(["hydra.run.dir=out/${hydra:job.override_dirname}", "module.lr=1e-3"])

    assert cfg.hydra.run.dir == "out/module.lr=1e-3"


def test_the_composed_config_stays_changeable():
    cfg = primus_hydra.compose()

    cfg.hydra.job.chdir = True

    assert without_hydra_node(cfg).module.lr == 0.003 and cfg.hydra.job.chdir is True


def test_resolving_a_run_dir_that_reads_hydras_config_leaves_hydras_state_and_the_node_as_they_were():
    from hydra.core.hydra_config import HydraConfig

    from primus_hydra.config.paths import hydra_job_dir

    cfg = primus_hydra.compose(["hydra.run.dir=out/${hydra:runtime.choices.model}"])
    assert cfg.hydra.run.dir == "out/llama_tiny" and not HydraConfig.initialized()
    cfg.hydra.run.dir = "again/${hydra:runtime.choices.model}"  # the node stays writable, as composed
    assert hydra_job_dir(cfg, sweep=False).parts[-2:] == ("again", "llama_tiny") and not HydraConfig.initialized()

    cfg.hydra.run.dir = "${hydra:job.override_dirname}"  # no task override: empty, refused; HydraConfig let go
    with pytest.raises(PrimusError, match="hydra.run.dir is empty"):
        hydra_job_dir(cfg, sweep=False)
    assert not HydraConfig.initialized()
