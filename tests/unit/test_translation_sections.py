"""The extra_args owner search runs again only the translation sections a changed value can move
(backends/translation_sections.py): the same owners as running every section for every variant, for each backend;
fewer sections run; and a translation that changes a section's kept result is translated from the config."""
from __future__ import annotations

import pytest

from primus_hydra.backends import extra_args_owners, translation_sections
from primus_hydra.backends.translation_sections import translation_section
from primus_hydra.orchestrator.prepare import prepare


def adapter_of(compose_config, tmp_path, *overrides: str):
    from primus_hydra.backends.base import load_adapter

    job = prepare(compose_config(*overrides, "module.data.source=mock", "task.dry_run=true"), run_dir=tmp_path,
                  trains=False)
    return load_adapter(job.cfg, job.layout, tmp_path)


@pytest.fixture
def sections_run(monkeypatch) -> list:
    """Each section a translation ran (rather than handed back), by name."""
    ran = []
    run = translation_sections.SectionMemo._run

    def counted(self, function, args):
        ran.append(function.__name__)
        return run(self, function, args)

    monkeypatch.setattr(translation_sections.SectionMemo, "_run", counted)
    return ran


@pytest.mark.parametrize("backend, overrides", [
    ("megatron", ["model=moe_tiny"]),
    ("megatron", ["model=deepseek_v2_lite"]),
    ("torchtitan", ["model=moe_tiny"]),
    ("maxtext", ["model=llama_tiny"]),
])
def test_kept_sections_give_the_owners_every_section_gives(compose_config, tmp_path, monkeypatch, sections_run,
                                                           backend, overrides):
    adapter = adapter_of(compose_config, tmp_path, f"backend={backend}", *overrides)
    kept = extra_args_owners.native_owners(adapter)
    ran_with_kept, sections_run[:] = len(sections_run), []
    replaying = translation_sections.SectionMemo.replaying
    monkeypatch.setattr(translation_sections.SectionMemo, "replaying",  # as if every section read every value
                        lambda self, unread: replaying(self, lambda section_reads: False))
    every = extra_args_owners.native_owners(adapter)
    assert any(kept.values()) and kept == every
    assert ran_with_kept < 0.5 * len(sections_run)  # most variants move one section


@translation_section
def _sizes(module) -> dict:
    return {"steps": module.train_iters, "nested": {"sequence": 0}}


class _ChangesAKeptResult:
    """An adapter whose translation writes into what a section returned (the sequence length, read outside it)."""

    name = "changes_a_kept_result"

    def __init__(self, cfg, layout, run_dir=None):
        self.cfg, self.layout, self.run_dir = cfg, layout, run_dir

    def convert_config(self) -> dict:
        args = _sizes(self.cfg.module)
        args["nested"]["sequence"] = self.cfg.module.seq_length
        return args


def test_a_translation_that_changes_a_kept_result_is_translated_from_the_config(compose_config, tmp_path):
    job = prepare(compose_config("module.data.source=mock", "task.dry_run=true"), run_dir=tmp_path, trains=False)
    owners = extra_args_owners.native_owners(_ChangesAKeptResult(job.cfg, job.layout, tmp_path))
    assert owners["steps"] == ["module.train_iters"] and owners["nested.sequence"] == ["module.seq_length"]


def test_outside_an_owner_search_a_section_is_a_plain_call():
    result = _sizes(type("Module", (), {"train_iters": 3})())
    result["nested"]["sequence"] = 1  # its own dict, as the function made it
    assert result == {"steps": 3, "nested": {"sequence": 1}}


def test_a_section_called_in_another_thread_during_a_search_is_a_plain_call():
    import threading

    from primus_hydra.backends.extra_args_owners import _Reads
    from primus_hydra.backends.translation_sections import SectionMemo

    memo = SectionMemo(_Reads(), lambda tree: "module")
    results = []
    with memo.recording():
        thread = threading.Thread(target=lambda: results.append(_sizes(type("Module", (), {"train_iters": 5})())))
        thread.start()
        thread.join()
    assert results == [{"steps": 5, "nested": {"sequence": 0}}] and memo.entries == {}
