"""Keys torchtitan moved between releases (key_moves.py: 0.2.1 opened the debug section) reach the installed
release under its own names through the build_args patches torchtitan.args.keys_*; the move Primus's PR #952 missed
(MoE load balancing silently off) is the test case."""
from __future__ import annotations

import pytest

from helpers.compose import run_job
from helpers.libraries import needs_torchtitan
from primus_hydra.backends.base import load_adapter
from primus_hydra.config.layout import parallel_layout
from primus_hydra.errors import PrimusError
from primus_hydra.patches.registry import PatchContext
from primus_hydra.patches.runner import load_patch_modules, run_patches

OLD_NAME = "+backend.extra_args.training.debug_moe_force_load_balance=true"


def args_for(compose_config, version: str, *overrides: str) -> dict:
    cfg = compose_config("backend=torchtitan", "module.data.source=mock", *overrides)
    load_patch_modules(cfg)
    ctx = PatchContext(backend="torchtitan", phase="build_args", backend_version=version, cfg=cfg, run_dir=None,
                       backend_args=load_adapter(cfg, parallel_layout(cfg, 1)).convert_config())
    run_patches(ctx, None)
    return ctx.backend_args


def test_0_2_0_gets_its_training_names_back(compose_config):
    args = args_for(compose_config, "0.2.0", "module.seed=9")
    assert "debug" not in args and args["training"]["seed"] == 9


def test_an_old_name_reaches_the_debug_section_of_0_2_1_and_later(compose_config):
    for version in ("0.2.1", "0.2.2", "0.3.0"):
        args = args_for(compose_config, version, OLD_NAME)
        assert args["debug"]["moe_force_load_balance"] is True
        assert "debug_moe_force_load_balance" not in args["training"]


def test_both_names_with_different_values_are_one_line(compose_config):
    both = (OLD_NAME, "+backend.extra_args.debug.moe_force_load_balance=false")
    with pytest.raises(PrimusError) as error:
        args_for(compose_config, "0.2.2", *both)
    assert str(error.value).endswith("training.debug_moe_force_load_balance=True and debug.moe_force_load_balance"
                                     "=False name the same torchtitan 0.2.2 setting (debug.moe_force_load_balance); "
                                     "keep one")
    assert str(error.value).startswith("patch torchtitan.args.keys_since_0_2_1 (build_args) failed")


@needs_torchtitan
def test_the_installed_torchtitan_reads_the_moved_key_as_set(compose_config, tmp_path):
    """End to end: the dry run's job file, after the patches, read by the installed torchtitan's ConfigManager."""
    from primus_hydra.backends.torchtitan.job_file import TOML_FILE, parse_job_file

    cfg = compose_config("backend=torchtitan", "module.data.source=mock", "backend.job_format=toml", OLD_NAME)
    adapter = load_adapter(cfg, parallel_layout(cfg, 1))
    assert adapter.training_failures() + adapter.library_failures() == []  # checked before launch, after patches
    run_job(compose_config("task.dry_run=true", "backend=torchtitan", "module.data.source=mock",
                           "backend.job_format=toml", OLD_NAME), tmp_path)
    assert parse_job_file(tmp_path / TOML_FILE).debug.moe_force_load_balance is True


@needs_torchtitan
def test_a_key_no_release_knows_is_one_line_before_launch(compose_config):
    cfg = compose_config("backend=torchtitan", "module.data.source=mock", "+backend.extra_args.debug.bogus_switch=1")
    adapter = load_adapter(cfg, parallel_layout(cfg, 1))
    failures = adapter.training_failures() + adapter.library_failures()
    assert len(failures) == 1 and failures[0].startswith("backend=torchtitan: torchtitan 0.2.2 does not know bogus_switch")
