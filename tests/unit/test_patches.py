"""Patch registry semantics: priority order, filters, version patterns, PRIMUS_PATCHES, failures."""
from __future__ import annotations

from pathlib import Path

import pytest

from primus_hydra.errors import PatchError
from primus_hydra.patches.registry import PatchContext, PatchRegistry, register_patch, resolve_enabled_ids
from primus_hydra.patches.runner import load_patch_modules, raise_load_errors, run_patches
from primus_hydra.patches.versions import version_matches


def context(phase="build_args", backend="megatron", version="0.16.1") -> PatchContext:
    return PatchContext(backend=backend, phase=phase, backend_version=version, cfg=None, run_dir=Path("."))


@pytest.fixture
def registry():
    return PatchRegistry()


def add(registry, patch_id, calls, **kwargs):
    kwargs.setdefault("phase", "build_args")

    @register_patch(patch_id, registry=registry, **kwargs)
    def handler(ctx):
        calls.append(patch_id)

    return handler


def test_patches_run_in_priority_order(registry):
    calls = []
    add(registry, "late", calls, priority=90)
    add(registry, "early", calls, priority=5)
    add(registry, "middle", calls)
    assert run_patches(context(), None, registry) == ["early", "middle", "late"] == calls


def test_backend_and_phase_filters(registry):
    calls = []
    add(registry, "any_backend", calls)
    add(registry, "megatron_only", calls, backend="megatron")
    add(registry, "titan_only", calls, backend="torchtitan")
    add(registry, "setup_phase", calls, phase="setup")
    run_patches(context(), None, registry)
    assert sorted(calls) == ["any_backend", "megatron_only"]


@pytest.mark.parametrize(
    "version, pattern, expected",
    [
        ("0.8.0", "0.8.0", True), ("0.8.1", "0.8.0", False), ("0.8.3", "0.8.*", True), ("0.9.0", "0.8.*", False),
        ("0.10.0", ">=0.8", True), ("0.7.9", ">=0.8", False), ("0.16.1", "<0.17", True), ("0.17.0", "<0.17", False),
        ("0.8.2", "0.8.0~0.8.5", True), ("0.8.6", "0.8.0~0.8.5", False), ("2.13.0+cpu", "2.13.*", True),
        ("0.16.1rc2", ">0.16", True), (None, ">=0.1", False), ("unknown", "0.8.*", False),
    ],
)
def test_version_patterns(version, pattern, expected):
    assert version_matches(version, pattern) is expected


def test_version_gated_patch_skips_on_unknown_version(registry):
    calls = []
    add(registry, "gated", calls, backend_versions=["<0.17"])
    add(registry, "ungated", calls)
    run_patches(context(version=None), None, registry)
    assert calls == ["ungated"]
    run_patches(context(version="0.16.0"), None, registry)
    assert calls == ["ungated", "gated", "ungated"]


def test_condition_filters(registry):
    calls = []
    add(registry, "only_tp2", calls, condition=lambda ctx: ctx.state.get("tp") == 2)
    ctx = context()
    run_patches(ctx, None, registry)
    ctx.state["tp"] = 2
    run_patches(ctx, None, registry)
    assert calls == ["only_tp2"]


def test_enabled_ids_allowlist_and_none(registry):
    calls = []
    add(registry, "a", calls)
    add(registry, "b", calls)
    run_patches(context(), {"b"}, registry)
    run_patches(context(), set(), registry)
    assert calls == ["b"]


@pytest.mark.parametrize(
    "env, config, expected",
    [({}, "all", None), ({}, "none", set()), ({}, "a, b", {"a", "b"}), ({"PRIMUS_PATCHES": "none"}, "all", set()),
     ({"PRIMUS_PATCHES": "x"}, "none", {"x"}), ({"PRIMUS_PATCHES": "ALL"}, "a", None)],
)
def test_primus_patches_env_wins_over_config(env, config, expected):
    assert resolve_enabled_ids(config, environ=env) == expected


def test_failing_patch_fails_the_run(registry):
    @register_patch("boom", phase="build_args", registry=registry)
    def boom(ctx):
        raise ValueError("bad value")

    with pytest.raises(PatchError, match=r"patch boom \(build_args\) failed: ValueError: bad value"):
        run_patches(context(), None, registry)


def test_optional_patch_failure_only_warns(registry, caplog):
    calls = []

    @register_patch("flaky", phase="build_args", optional=True, priority=1, registry=registry)
    def flaky(ctx):
        raise RuntimeError("no GPU")

    add(registry, "after", calls)
    assert run_patches(context(), None, registry) == ["after"]
    assert "flaky (build_args) failed: RuntimeError: no GPU (optional patch, continuing)" in caplog.text


def test_same_id_from_two_functions_is_refused(registry):
    add(registry, "dup", [])
    with pytest.raises(PatchError, match="registered twice"):
        @register_patch("dup", phase="setup", registry=registry)
        def other(ctx):
            pass


def test_unknown_phase_and_bad_version_pattern_are_refused(registry):
    with pytest.raises(PatchError, match="phase='teardown' is not one of"):
        add(registry, "x", [], phase="teardown")
    with pytest.raises(PatchError, match="is not a version pattern"):
        add(registry, "y", [], backend_versions=["latest"])


def test_unimportable_user_module_is_recorded_then_raised(compose_config, registry):
    cfg = compose_config("patches.modules=[no_such_patch_module]")
    load_patch_modules(cfg, registry)
    assert registry.load_errors and "cannot import 'no_such_patch_module'" in registry.load_errors[0]
    with pytest.raises(PatchError, match="no_such_patch_module"):
        raise_load_errors(registry)
