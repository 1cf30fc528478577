"""The sweep's own arguments are checked before any point is composed: one line each, exit 2."""
from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from primus_hydra.launch.sweep.basic import check_sweep_arguments


def errors_of(capsys, tmp_path, *arguments: str, max_batch_size=None) -> list[str]:
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    overrides = OverridesParser.create().parse_overrides(list(arguments))
    with pytest.raises(SystemExit) as stop:
        check_sweep_arguments(config, overrides, max_batch_size)
    assert stop.value.code == 2
    return capsys.readouterr().err.splitlines()


def test_a_key_given_twice_would_silently_collapse_the_sweep(capsys, tmp_path):
    assert errors_of(capsys, tmp_path, "module.lr=1e-3,2e-3", "module.lr=3e-3") == [
        "error: module.lr is given 2 times on the command line (module.lr=1e-3,2e-3, module.lr=3e-3): only the last "
        "would count; give it once (a,b,c sweeps over several values)"]


def test_an_empty_range_sweeps_over_nothing(capsys, tmp_path):
    assert errors_of(capsys, tmp_path, "module.train_iters=range(5,1)") == [
        "error: module.train_iters=range(5,1): sweeps over no values; give at least one"]


def test_a_batch_size_below_one(capsys, tmp_path):
    assert errors_of(capsys, tmp_path, "module.lr=1,2", max_batch_size=0) == [
        "error: hydra.sweeper.max_batch_size=0: must be >= 1 (or null: one batch)"]


def test_good_arguments_pass_and_create_nothing(tmp_path):
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    overrides = OverridesParser.create().parse_overrides(["module.lr=1e-3,2e-3", "model=glob(*)", "+x=range(1,3)"])
    check_sweep_arguments(config, overrides, None)
    assert not (tmp_path / "sweep").exists()
