"""The resource plan on faked machines: the seed's tables (docs: mhcflurry_parallelism research notes, section 4)."""
from __future__ import annotations

import json

import pytest

from primus_hydra.orchestrator import rules
from primus_hydra.orchestrator.gpu_probe import GpuInfo
from primus_hydra.orchestrator.plan import build_resource_plan, tighten_with_measured_peak, write_resources_json
from primus_hydra.orchestrator.resources import MachineResources


def fake_machine(gpus: int = 0, free_gib=80.0, vcpus: int = 176, ram_gib=2000.0, first_gpu: int = 0) -> MachineResources:
    free = free_gib if isinstance(free_gib, list) else [free_gib] * gpus
    return MachineResources(tuple(GpuInfo(first_gpu + i, "nvidia", f) for i, f in enumerate(free)), vcpus,
                            tuple(range(vcpus)), ram_gib, {}, "CUDA_VISIBLE_DEVICES" if gpus else None)


def plan(compose_config, machine, *overrides, points=1, env=None):
    cfg = compose_config(*overrides)
    return build_resource_plan(cfg, machine, sweep_points=points, environ=env or {})


FOUR_GIB = {"PRIMUS_AUTO_PER_JOB_GB": "4"}


# -- the DataLoader rule: (vCPU, RAM GiB, training processes) -> children per process ---------------------------

@pytest.mark.parametrize("vcpus, ram, processes, expected", [
    (176, 400, 16, 4),  # 8xA100-80 (Verda)
    (176, 400, 8, 4),  # 8xA100-40
    (96, 200, 16, 3),  # 8xL40S
    (30, 200, 2, 4),  # single A100-80 (Lambda)
    (16, 64, 2, 4),  # single A100-80, tight
    (8, 16, 1, 4),  # T4 / RTX
    (32, 64, 16, 1),  # tight cluster node
    (8, 16, 4, 1),  # tiny cluster
    (8, 16, 8, 0),  # very tight: oversubscribed mains
    (64, 200, 0, 0),  # serial
    (64, 200, 1, 4),  # single fit
    (176, 32, 16, 0), (176, 64, 16, 4), (176, 16, 16, 0),  # RAM-limited
    (176, None, 16, 4), (8, None, 8, 0),  # RAM unknown
])
def test_dataloader_workers_hardware_tiers(vcpus, ram, processes, expected):
    assert rules.auto_dataloader_num_workers(processes, vcpus, ram) == expected


@pytest.mark.parametrize("cap, expected", [(2, 2), (0, 0), (8, 5)])
def test_dataloader_hard_cap(cap, expected):
    assert rules.auto_dataloader_num_workers(16, 176, 400, hard_cap=cap) == expected


def test_dataloader_hard_cap_env_reaches_the_plan(compose_config):
    p = plan(compose_config, fake_machine(vcpus=176, ram_gib=400), "launch.nproc_per_node=1",
             env={"PRIMUS_AUTO_DATALOADER_HARD_CAP": "2"})
    assert p.num_workers == 2 and p.auto["module.data.num_workers"]


# -- jobs per GPU: shared reserve max(10 %, 1 GiB), no default cap -----------------------------------------------

@pytest.mark.parametrize("free, per_job, expected", [
    (80, 4, 18), (40, 4, 9), (16, 4, 3), (8, 4, 1), (40, 24, 1), (16, 16, 0), (80, 25, 2), (2, 0.5, 2),
])
def test_jobs_per_device(free, per_job, expected):
    assert rules.jobs_per_device(free, per_job) == expected


@pytest.mark.parametrize("gpus, free, env, points, jobs_per_gpu, parallel", [
    (8, 80.0, FOUR_GIB, 1000, 18, 144),  # 80 GiB free -> 18 jobs of 4 GiB per GPU
    (8, 40.0, FOUR_GIB, 1000, 9, 72),
    (2, 80.0, FOUR_GIB, 1000, 18, 36),  # a mask of two GPUs
    (8, 40.0, {"PRIMUS_AUTO_PER_JOB_GB": "24"}, 1000, 1, 8),
    (8, 80.0, {**FOUR_GIB, "PRIMUS_AUTO_JOBS_PER_GPU_HARD_CAP": "3"}, 1000, 3, 24),
    (8, 80.0, {"PRIMUS_AUTO_PER_JOB_GB": "25"}, 1000, 2, 16),
    (8, 80.0, FOUR_GIB, 20, 3, 20),  # fewer points than slots: only as many as there are points
])
def test_sweep_concurrency_from_free_gpu_memory(compose_config, gpus, free, env, points, jobs_per_gpu, parallel):
    p = plan(compose_config, fake_machine(gpus, free), "launch.nproc_per_node=1", points=points, env=env)
    assert (p.jobs_per_gpu, p.parallel_jobs, p.per_job_source) == (jobs_per_gpu, parallel, "env")
    assert len(p.slots) == parallel


def test_a_mask_uses_the_masked_physical_ids(compose_config):
    p = plan(compose_config, fake_machine(2, 80.0, first_gpu=2), "launch.nproc_per_node=1", points=4, env=FOUR_GIB)
    assert [s.gpu_ids for s in p.slots] == [(2,), (3,), (2,), (3,)]  # spread over the GPUs before stacking


def test_multi_gpu_points_get_disjoint_gpu_groups(compose_config):
    p = plan(compose_config, fake_machine(4, 80.0), "launch.nproc_per_node=2", "module.micro_batch_size=4",
             points=2, env=FOUR_GIB)
    assert [s.gpu_ids for s in p.slots] == [(0, 1), (2, 3)]


def test_uneven_free_memory_sizes_by_the_smallest_gpu_with_a_warning(compose_config):
    p = plan(compose_config, fake_machine(2, [80.0, 40.0]), "launch.nproc_per_node=1", points=100, env=FOUR_GIB)
    assert p.jobs_per_gpu == 9 and any("uneven" in w for w in p.warnings)


def test_unknown_free_memory_means_one_job_per_gpu(compose_config):
    p = plan(compose_config, fake_machine(4, None), "launch.nproc_per_node=1", points=100, env=FOUR_GIB)
    assert (p.jobs_per_gpu, p.parallel_jobs) == (1, 4) and any("PRIMUS_AUTO_FREE_VRAM_GB" in w for w in p.warnings)


def test_a_job_larger_than_any_gpu_warns_and_runs_one_per_gpu(compose_config):
    p = plan(compose_config, fake_machine(1, 16.0), "launch.nproc_per_node=1", points=4,
             env={"PRIMUS_AUTO_PER_JOB_GB": "16"})
    assert (p.jobs_per_gpu, p.parallel_jobs) == (1, 1)
    assert p.warnings == ["the per-job estimate 16.0 GiB exceeds the usable free memory of the GPU(s) (14.4 of 16.0 GiB): "
                          "1 job per GPU, one at a time; it may run out of memory (more tp/pp/fsdp, a smaller micro batch)"]


def test_host_ram_bounds_the_jobs(compose_config):
    # 2 GiB per GPU job on the host; 20 GiB RAM - 2 GiB reserve = 18 GiB -> 9 jobs
    p = plan(compose_config, fake_machine(8, 80.0, ram_gib=20.0), "launch.nproc_per_node=1", points=1000, env=FOUR_GIB)
    assert p.parallel_jobs == 9


def test_vcpus_bound_the_jobs(compose_config):
    p = plan(compose_config, fake_machine(8, 141.0, vcpus=16), "launch.nproc_per_node=1", points=1000, env=FOUR_GIB)
    assert p.parallel_jobs == 16 and p.threads_per_worker == 1


def test_cpu_only_jobs_are_bounded_by_cores_and_ram(compose_config):
    cores = plan(compose_config, fake_machine(0, vcpus=8, ram_gib=400.0), points=100)
    assert cores.parallel_jobs == 8 and cores.jobs_per_gpu is None and cores.slots[0].gpu_ids == ()
    ram = plan(compose_config, fake_machine(0, vcpus=64, ram_gib=12.0), points=100)  # llama_tiny: ~2.2 GiB a job
    assert ram.parallel_jobs == 4


def test_nothing_fits_falls_back_to_serial_with_a_warning(compose_config):
    p = plan(compose_config, fake_machine(0, vcpus=8, ram_gib=2.0), points=10)
    assert p.parallel_jobs == 1 and any("one at a time" in w for w in p.warnings)


def test_platform_cpu_ignores_visible_gpus(compose_config):
    p = plan(compose_config, fake_machine(4, 80.0, vcpus=8), "platform.device=cpu", points=100)
    assert p.nproc_per_node == 1 and p.jobs_per_gpu is None and p.slots[0].gpu_ids == ()


# -- auto vs explicit ------------------------------------------------------------------------------------------

def test_auto_nproc_is_the_visible_gpus_else_one(compose_config):
    assert plan(compose_config, fake_machine(8), "launch.nproc_per_node=auto").nproc_per_node == 8
    assert plan(compose_config, fake_machine(0), "launch.nproc_per_node=auto").nproc_per_node == 1


def test_explicit_values_are_never_replaced(compose_config):
    p = plan(compose_config, fake_machine(8, 80.0), "launch.nproc_per_node=2", "module.micro_batch_size=4",
             "module.data.num_workers=0", "sweep.max_parallel=3", points=100,
             env={**FOUR_GIB, "OMP_NUM_THREADS": "7"})
    assert (p.nproc_per_node, p.num_workers, p.parallel_jobs) == (2, 0, 3)
    assert not any(p.auto[k] for k in ("launch.nproc_per_node", "module.data.num_workers", "sweep.max_parallel", "threads"))
    assert "OMP_NUM_THREADS" not in p.worker_env and p.worker_env["MKL_NUM_THREADS"] == str(p.threads_per_worker)


def test_an_explicit_max_parallel_above_capacity_is_honored_with_a_warning(compose_config):
    p = plan(compose_config, fake_machine(1, 16.0), "sweep.max_parallel=4", points=10, env=FOUR_GIB)
    assert p.parallel_jobs == 4 and any("sweep.max_parallel=4 exceeds" in w for w in p.warnings)


# -- threads and compile threads -----------------------------------------------------------------------------

@pytest.mark.parametrize("vcpus, processes, loaders, expected", [(34, 8, 1, 3), (10, 2, 0, 4), (6, 2, 0, 2), (4, 64, 0, 1)])
def test_thread_budget(vcpus, processes, loaders, expected):
    assert rules.threads_per_process(vcpus, processes, loaders, in_process=False) == expected


def test_a_single_in_process_run_keeps_all_cores(compose_config):
    p = plan(compose_config, fake_machine(0, vcpus=2, ram_gib=16.0))
    assert p.threads_per_worker == 2 and p.worker_env == {v: "2" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def test_elastic_workers_share_the_cores(compose_config):
    p = plan(compose_config, fake_machine(0, vcpus=34, ram_gib=400.0), "launch.nproc_per_node=8",
             "module.micro_batch_size=1", "backend=megatron", "module.data.num_workers=1")
    assert (p.num_workers, p.threads_per_worker) == (1, 3)  # (34 - 2 - 8*1) // 8
    auto = plan(compose_config, fake_machine(0, vcpus=34, ram_gib=400.0), "launch.nproc_per_node=8",
                "module.micro_batch_size=1", "backend=megatron")
    assert (auto.num_workers, auto.threads_per_worker) == (2, 2)  # (34 // 8) // 2 children; (34 - 2 - 8*2) // 8


def test_backend_torch_has_no_loader_processes_to_budget_for(compose_config):
    p = plan(compose_config, fake_machine(0, vcpus=34, ram_gib=400.0), "launch.nproc_per_node=8", "module.micro_batch_size=1")
    assert (p.num_workers, p.threads_per_worker) == (2, 4)  # reported; threads (34 - 2) // 8


@pytest.mark.parametrize("vcpus, processes, warmup, expected", [
    (64, 8, False, 8), (4, 1, False, 4), (32, 16, False, 2), (4, 64, False, 1), (64, 4, False, 16), (64, 1, True, 64),
    (128, 1, True, 64),
])
def test_compile_threads(vcpus, processes, warmup, expected):
    assert rules.compile_threads(vcpus, processes, warmup=warmup) == expected


def test_compile_threads_are_hoisted_with_module_compile(compose_config):
    p = plan(compose_config, fake_machine(0, vcpus=64, ram_gib=400.0), "module.compile=true", "launch.nproc_per_node=4",
             "module.micro_batch_size=2")
    assert p.worker_env["TORCHINDUCTOR_COMPILE_THREADS"] == "16"
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in plan(compose_config, fake_machine(0, vcpus=64)).worker_env


def test_the_auto_compile_threads_sentinel_is_replaced_even_without_compile(compose_config):
    p = plan(compose_config, fake_machine(0, vcpus=64, ram_gib=400.0), env={"TORCHINDUCTOR_COMPILE_THREADS": "auto"})
    assert p.worker_env["TORCHINDUCTOR_COMPILE_THREADS"] == "16"


def test_user_compile_threads_are_kept(compose_config):
    p = plan(compose_config, fake_machine(0, vcpus=64), "module.compile=true", env={"TORCHINDUCTOR_COMPILE_THREADS": "12"})
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in p.worker_env


# -- the per-job working set ------------------------------------------------------------------------------------

def test_the_working_set_is_estimated_from_the_model(compose_config):
    tiny = plan(compose_config, fake_machine(1), "launch.nproc_per_node=1")
    big = plan(compose_config, fake_machine(1), "launch.nproc_per_node=1", "model=llama3_8b")
    assert tiny.per_job_source == big.per_job_source == "estimate"
    assert 1.0 < tiny.per_job_gib < 2.0 and big.per_job_gib > 16 * 8.03e9 / 2 ** 30  # states alone: 16 B/param


def test_tensor_parallel_and_fsdp_shrink_the_estimate(compose_config):
    base = plan(compose_config, fake_machine(8), "model=llama3_8b", "launch.nproc_per_node=8", "module.micro_batch_size=1")
    tp = plan(compose_config, fake_machine(8), "model=llama3_8b", "launch.nproc_per_node=8", "module.micro_batch_size=1",
              "module.parallel.tp=8")
    fsdp = plan(compose_config, fake_machine(8), "model=llama3_8b", "launch.nproc_per_node=8", "module.micro_batch_size=1",
                "module.parallel.fsdp=true")
    assert tp.per_job_gib < base.per_job_gib / 4 and fsdp.per_job_gib < base.per_job_gib / 4


# -- the probe tightens, never loosens ------------------------------------------------------------------------

def test_a_measured_peak_tightens_an_auto_plan(compose_config):
    p = plan(compose_config, fake_machine(1, 80.0), "launch.nproc_per_node=1", points=100, env=FOUR_GIB)
    tightened = tighten_with_measured_peak(p, 20.0, environ=FOUR_GIB)
    assert (p.jobs_per_gpu, tightened.jobs_per_gpu, tightened.parallel_jobs) == (18, 3, 3)  # 72 // (1.15 * 20)
    assert tightened.per_job_source == "probe" and tightened.per_job_gib == pytest.approx(23.0)


def test_a_small_measured_peak_never_loosens(compose_config):
    p = plan(compose_config, fake_machine(1, 80.0), "launch.nproc_per_node=1", points=100, env=FOUR_GIB)
    tightened = tighten_with_measured_peak(p, 0.1, environ=FOUR_GIB)
    assert (tightened.jobs_per_gpu, tightened.parallel_jobs, tightened.per_job_gib) == (18, 18, 4.0)


def test_a_measured_peak_leaves_explicit_values_alone(compose_config):
    p = plan(compose_config, fake_machine(1, 80.0), "launch.nproc_per_node=1", "sweep.max_parallel=2", points=100, env=FOUR_GIB)
    assert tighten_with_measured_peak(p, 60.0, environ=FOUR_GIB).parallel_jobs == 2


def test_a_measured_host_peak_bounds_jobs_by_ram(compose_config):
    p = plan(compose_config, fake_machine(1, 80.0, ram_gib=32.0), "launch.nproc_per_node=1", points=100, env=FOUR_GIB)
    assert tighten_with_measured_peak(p, 1.0, host_peak_gib=5.0, environ=FOUR_GIB).parallel_jobs == 5  # 28.8 // 5.5


# -- reporting -------------------------------------------------------------------------------------------------

def test_resources_json_and_table(compose_config, tmp_path):
    p = plan(compose_config, fake_machine(2, 80.0), "launch.nproc_per_node=auto", points=3, env=FOUR_GIB)
    data = json.loads(write_resources_json(p, tmp_path).read_text())
    assert data["nproc_per_node"] == 2 and data["auto"]["launch.nproc_per_node"] is True
    assert data["resources"]["gpus"] == [{"index": 0, "vendor": "nvidia", "free_gib": 80.0},
                                         {"index": 1, "vendor": "nvidia", "free_gib": 80.0}]
    table = p.format_table()
    assert table.splitlines()[0] == "resource plan: 2 GPU(s) [free GiB: 80.0, 80.0], 176 vCPU(s), 2000.0 GiB RAM available"
    assert "launch.nproc_per_node    2" in table
