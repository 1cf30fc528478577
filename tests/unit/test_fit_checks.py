"""A job the orchestrator's own estimate says cannot fit this node is refused before any worker starts."""
from __future__ import annotations

import pytest

from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare


@pytest.fixture
def machine(monkeypatch):
    """This node as the orchestrator sees it, through the documented overrides (the real detection path)."""
    def set_machine(ram_gib: float, gpus: int = 0, free_vram_gib: float | None = None):
        monkeypatch.setenv("PRIMUS_AUTO_RAM_GB", str(ram_gib))
        monkeypatch.setenv("PRIMUS_AUTO_NUM_GPUS", str(gpus))
        monkeypatch.setenv("PRIMUS_AUTO_VCPUS", "8")
        if free_vram_gib is not None:
            monkeypatch.setenv("PRIMUS_AUTO_FREE_VRAM_GB", str(free_vram_gib))
    return set_machine


def refusal(cfg) -> list[str]:
    with pytest.raises(ConfigValidationError) as info:
        prepare(cfg)
    return [line for line in info.value.failures if "does not fit" in line]


def test_a_batch_too_large_for_host_memory_is_refused_with_the_numbers(compose_config, machine):
    machine(ram_gib=21.8)
    lines = refusal(compose_config("module.micro_batch_size=200000", "module.global_batch_size=200000"))
    assert len(lines) == 1
    assert lines[0].startswith("the job does not fit in host memory: about ")
    assert "micro_batch_size=200000" in lines[0] and "but 21.8 GiB are available on this node" in lines[0]
    assert "launch.allow_oversubscribe=true" in lines[0]


def test_a_big_model_on_the_cpu_is_refused_by_task_plan_too(compose_config, machine):
    machine(ram_gib=21.8)
    lines = refusal(compose_config("task=plan", "model=llama3_8b", "platform.device=cpu"))
    assert lines and "model=llama3_8b" in lines[0]


def test_a_thousand_processes_are_refused_by_their_host_memory(compose_config, machine):
    machine(ram_gib=21.8)
    lines = refusal(compose_config("launch.nproc_per_node=1000", "module.micro_batch_size=1",
                                   "module.global_batch_size=1000"))
    assert lines and "(1000 processes x " in lines[0]


def test_a_rank_larger_than_the_free_gpu_memory_is_refused(compose_config, machine):
    machine(ram_gib=500, gpus=1, free_vram_gib=10)
    lines = refusal(compose_config("model=llama3_8b"))
    assert len(lines) == 1
    assert lines[0].startswith("the job does not fit in GPU memory: each rank needs about ")
    assert "but GPU 0 has 10.0 GiB free" in lines[0]


def test_allow_oversubscribe_lets_an_expert_insist(compose_config, machine):
    machine(ram_gib=21.8)
    job = prepare(compose_config("model=llama3_8b", "platform.device=cpu", "launch.allow_oversubscribe=true",
                                 "task.dry_run=false"))
    assert job.plan.per_job_gib > 21.8


def test_a_job_that_fits_is_not_refused(compose_config, machine):
    machine(ram_gib=4)
    assert prepare(compose_config("launch.nproc_per_node=4", "module.global_batch_size=32")).layout.world_size == 4


def test_a_model_that_cannot_be_estimated_is_never_refused(compose_config, machine):
    """Without an estimate the plan's per-job size is a guess (the fallback): it sizes sweeps but refuses nothing."""
    from primus_hydra.orchestrator.fit_checks import fit_failures
    from primus_hydra.orchestrator.plan import plan_for_generic_points

    machine(ram_gib=1)
    plan = plan_for_generic_points(1)
    assert plan.per_job_source == "fallback"
    assert fit_failures(compose_config("launch.nproc_per_node=8"), plan) == []


def test_a_dry_run_only_translates_arguments_and_is_not_refused(compose_config, machine):
    machine(ram_gib=21.8)
    assert prepare(compose_config("model=llama3_8b", "platform.device=cpu", "task.dry_run=true"), trains=False)
