"""The `logger` group (conf/logger/): every option composes into the typed schema, the default keeps TensorBoard as
before, a bad sink is refused at composition, a tracker whose library is missing is one line naming the extra, and
composing never imports a tracker library or torch."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from helpers.cli import clean_env
from primus_hydra.config.validate import validate_config
from primus_hydra.errors import ConfigValidationError

OPTIONS = {"tensorboard": ["tensorboard"], "csv": ["csv"], "wandb": ["wandb"], "mlflow": ["mlflow"],
           "many": ["tensorboard", "csv"]}


def test_the_default_logger_is_tensorboard(compose_config):
    cfg = compose_config()
    assert cfg.logger.name == "tensorboard" and [str(sink) for sink in cfg.logger.use] == ["tensorboard"]
    assert cfg.module.log.tensorboard is True


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_logger_option_composes_with_its_sinks(compose_config, option):
    cfg = compose_config(f"logger={option}")
    assert cfg.logger.name == option and [str(sink) for sink in cfg.logger.use] == OPTIONS[option]


def test_the_trackers_keys_are_their_libraries_names(compose_config):
    cfg = compose_config("logger=many", "logger.use=[tensorboard,mlflow,wandb]", "logger.wandb.mode=offline",
                         "logger.wandb.tags=[a,b]", "logger.mlflow.tracking_uri=http://127.0.0.1:5000",
                         "+logger.mlflow.tags.team=llm")
    assert set(cfg.logger.wandb) == {"project", "entity", "group", "name", "tags", "mode", "dir"}
    assert set(cfg.logger.mlflow) == {"tracking_uri", "experiment_name", "run_name", "tags"}
    assert cfg.logger.wandb.mode == "offline" and list(cfg.logger.wandb.tags) == ["a", "b"]
    assert dict(cfg.logger.mlflow.tags) == {"team": "llm"}


@pytest.mark.parametrize("override, message", [
    ("logger.use=[neptune]", "Invalid value 'neptune', expected one of [tensorboard, csv, wandb, mlflow]"),
    ("logger.wandb.mode=sometimes", "Invalid value 'sometimes', expected one of [online, offline, disabled]"),
    ("logger.wandb.projekt=x", "Key 'projekt' not in 'WandbConfig'"),
])
def test_a_bad_logger_value_fails_at_composition(compose_config, override, message):
    with pytest.raises(Exception) as info:
        compose_config("logger=many", override)
    assert message in f"{info.value} {info.value.__cause__}"


@pytest.mark.parametrize("option, extra", [("wandb", "wandb"), ("mlflow", "mlflow")])
def test_a_tracker_without_its_library_is_one_line_naming_the_extra(compose_config, monkeypatch, option, extra):
    cfg = compose_config(f"logger={option}")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == extra else real_find_spec(name, *a))
    with pytest.raises(ConfigValidationError) as info:
        validate_config(cfg)
    assert info.value.failures == [f"logger.use={option}: the {extra} package is not installed; install it with "
                                   f"pip install 'primus-hydra[{extra}]' (or choose another logger=)"]


def test_logger_limits_must_be_positive(compose_config):
    with pytest.raises(ConfigValidationError) as info:
        validate_config(compose_config("logger.timeout_s=0", "logger.queue_size=0"))
    assert info.value.failures == ["logger.timeout_s=0.0: must be > 0 (seconds)", "logger.queue_size=0: must be >= 1"]


def test_composing_a_tracker_logger_imports_no_tracker_library_nor_torch(tmp_path):
    code = ("import os, runpy, sys\n"
            "exit_now = os._exit\n"  # the CLI ends with os._exit, which skips atexit
            "os._exit = lambda code: (print('HEAVY=%s' % sorted(m for m in ('torch', 'mlflow', 'wandb') "
            "if m in sys.modules), file=sys.stderr, flush=True), exit_now(code))\n"
            "sys.argv = ['primus_hydra', *sys.argv[1:]]\n"
            "runpy.run_module('primus_hydra', run_name='__main__', alter_sys=True)\n")
    result = subprocess.run([sys.executable, "-c", code, "--cfg", "job", "logger=many", "logger.use=[mlflow,wandb]"],
                            capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "name: many" in result.stdout and "HEAVY=[]" in result.stderr
