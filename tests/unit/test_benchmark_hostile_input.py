"""task=benchmark and task=preflight under hostile and unlucky input, piece by piece: the memory a suite allocates
(checked at prepare, not a training step's), repetition counts that would never end, socket-interface variables read
as each library reads them, fast-kernel dtypes, progress with the time left, preflight messages that say exactly what
failed, and collectives whose check catches a misplaced chunk."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from primus_hydra.benchmark.cases import (
    GIB,
    CollectiveCase,
    GemmCase,
    elements_for,
    rounding_note,
    suite_cases,
)
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.network_interfaces import socket_interface_failures
from primus_hydra.tasks.benchmark import BenchmarkTask, benchmark_failures, suite_memory_need

INTERFACES = {"lo": True, "eth0": True, "ifb0": False}  # name: has an IP address


@pytest.fixture
def machine(monkeypatch):
    """A CPU node with this much RAM, through the documented overrides."""
    def set_machine(ram_gib: float):
        monkeypatch.setenv("PRIMUS_AUTO_RAM_GB", str(ram_gib))
        monkeypatch.setenv("PRIMUS_AUTO_NUM_GPUS", "0")
        monkeypatch.setenv("PRIMUS_AUTO_VCPUS", "8")
    return set_machine


# -- the memory a suite allocates --------------------------------------------------------------------------------
def test_a_square_gemm_case_holds_its_three_matrices():
    assert GemmCase("square", 100000, 100000, 100000, "fp32").nbytes == 3 * 100000 ** 2 * 4


def test_an_fp8_gemm_case_counts_the_float32_draw_and_the_bf16_product():
    case = GemmCase("square", 1000, 1000, 1000, "fp8")
    assert case.nbytes == 1000 ** 2 * (1 + 1 + 2 + 4)


def test_the_memory_need_is_the_largest_case_plus_the_context(compose_config):
    cfg = compose_config("task=benchmark", "task.sizes=[100000]", "platform.device=cpu")
    need = suite_memory_need(cfg, suite_cases(cfg, on_gpu=False, world=1))
    assert need.gib == pytest.approx(3 * 100000 ** 2 * 4 / GIB + 1.0)
    assert need.what == "task.suite=gemm, task.sizes=[100000]: its largest case, gemm 100000^3 fp32, holds 111.8 GiB"
    assert need.fixes == "use smaller task.sizes (a gemm of M = N = K = s holds 3 s^2 elements)"


def test_a_gemm_size_beyond_host_memory_is_refused_at_prepare(compose_config, machine):
    machine(ram_gib=16)
    with pytest.raises(ConfigValidationError) as refused:
        BenchmarkTask.prepare_job(compose_config("task=benchmark", "task.sizes=[100000]", "platform.device=cpu"), None)
    assert refused.value.failures == [
        "the job does not fit in host memory: about 112.3 GiB (1 process x 112.3 GiB; task.suite=gemm, "
        "task.sizes=[100000]: its largest case, gemm 100000^3 fp32, holds 111.8 GiB; estimate) but 16.0 GiB are "
        "available on this node; use smaller task.sizes (a gemm of M = N = K = s holds 3 s^2 elements), or set "
        "launch.allow_oversubscribe=true to start it anyway"]


def test_collective_buffers_beyond_host_memory_are_refused_for_every_process(compose_config, machine):
    machine(ram_gib=16)
    cfg = compose_config("task=benchmark", "task.suite=collectives", "launch.nproc_per_node=2",
                         "task.sizes=[10000000000]", "platform.device=cpu")
    with pytest.raises(ConfigValidationError) as refused:
        BenchmarkTask.prepare_job(cfg, None)
    (line,) = refused.value.failures
    assert line.startswith("the job does not fit in host memory: about 75.6 GiB (2 processes x 37.8 GiB; "
                           "task.suite=collectives, task.sizes=[10000000000]: its largest case, all_to_all "
                           "10,000,000,000 B (intra_node), holds 37.3 GiB; estimate)")


def test_attention_on_a_big_model_is_sized_by_its_own_tensors_not_by_training(compose_config, machine):
    machine(ram_gib=16)
    job = BenchmarkTask.prepare_job(compose_config("task=benchmark", "task.suite=attention", "model=llama3_8b",
                                                   "platform.device=cpu"), None)
    (case,) = suite_cases(job.cfg, on_gpu=False, world=1)
    assert job.plan.per_job_gib == pytest.approx(case.nbytes / GIB + 1.0)
    assert job.plan.per_job_source == "estimate"


def test_preflight_is_sized_by_its_gemm_not_by_training_the_model(compose_config, machine):
    from primus_hydra.tasks.preflight import PreflightTask

    machine(ram_gib=16)
    job = PreflightTask.prepare_job(compose_config("task=preflight", "model=llama3_8b", "platform.device=cpu"), None)
    assert job.plan.per_job_gib == pytest.approx(3 * 1024 ** 2 * 4 / GIB + 1.0)


# -- repetitions ---------------------------------------------------------------------------------------------------
def test_a_warmup_that_would_never_end_is_refused(compose_config):
    cfg = compose_config("task=benchmark", "task.warmup=1000000000")
    assert benchmark_failures(cfg, 1, on_cpu=True) == [
        "task.warmup=1000000000: must be an integer in [0, 1000] (untimed repetitions of each case)"]


def test_timed_iterations_beyond_the_bound_are_refused(compose_config):
    cfg = compose_config("task=benchmark", "task.iters=100000")
    assert benchmark_failures(cfg, 1, on_cpu=True) == [
        "task.iters=100000: must be an integer in [1, 1000] (timed repetitions of each case; their median is "
        "reported)"]


# -- socket interfaces, as each library reads them ------------------------------------------------------------------
def test_a_gloo_interface_that_does_not_exist_is_refused_naming_the_usable_ones():
    assert socket_interface_failures({"GLOO_SOCKET_IFNAME": "nosuch0"}, on_gpu=False, interfaces=INTERFACES) == [
        "GLOO_SOCKET_IFNAME=nosuch0: no network interface nosuch0 on this machine (interfaces with an IP address: "
        "eth0, lo); name one of them or unset it"]


def test_gloo_names_are_exact_not_prefixes():
    assert socket_interface_failures({"GLOO_SOCKET_IFNAME": "eth"}, on_gpu=False, interfaces=INTERFACES) == [
        "GLOO_SOCKET_IFNAME=eth: no network interface eth on this machine (interfaces with an IP address: eth0, "
        "lo); name one of them or unset it"]


def test_a_gloo_interface_without_an_address_is_refused():
    assert socket_interface_failures({"GLOO_SOCKET_IFNAME": "ifb0"}, on_gpu=False, interfaces=INTERFACES) == [
        "GLOO_SOCKET_IFNAME=ifb0: interface ifb0 has no IP address to bind (interfaces with one: eth0, lo); name "
        "one of them or unset it"]


def test_every_gloo_interface_of_a_list_must_exist():
    failures = socket_interface_failures({"GLOO_SOCKET_IFNAME": "lo,nosuch0"}, on_gpu=False, interfaces=INTERFACES)
    assert [line.split(":")[0] for line in failures] == ["GLOO_SOCKET_IFNAME=lo,nosuch0"]


def test_a_one_character_gloo_value_is_ignored_as_torch_ignores_it():
    assert socket_interface_failures({"GLOO_SOCKET_IFNAME": "x"}, on_gpu=False, interfaces=INTERFACES) == []


def test_nccl_needs_one_matching_prefix_and_only_on_gpus():
    env = {"NCCL_SOCKET_IFNAME": "ib,eth"}
    assert socket_interface_failures(env, on_gpu=True, interfaces=INTERFACES) == []
    assert socket_interface_failures({"NCCL_SOCKET_IFNAME": "ib"}, on_gpu=False, interfaces=INTERFACES) == []
    assert socket_interface_failures({"NCCL_SOCKET_IFNAME": "ib"}, on_gpu=True, interfaces=INTERFACES) == [
        "NCCL_SOCKET_IFNAME=ib: no network interface whose name starts with ib on this machine (it has eth0, ifb0, "
        "lo); name one of them or unset it"]


# -- dtypes without a fast kernel, the estimate and progress ----------------------------------------------------------
def test_a_dtype_far_slower_than_fp32_is_left_out_in_one_line(monkeypatch):
    import torch

    from primus_hydra.benchmark import gemm

    rates = {"fp32": 0.1, "bf16": 0.3, "fp16": 0.002}  # TFLOP/s, as a CPU without fp16 kernels measures them
    monkeypatch.setattr(gemm, "best_tflops", lambda dtype, device: rates[dtype])
    kept, skipped = gemm.fast_kernel_dtypes(["fp32", "bf16", "fp16"], torch.device("cpu"))
    assert kept == ["fp32", "bf16"]
    assert skipped == ["fp16 skipped: 2 GFLOP/s at 256^3 against fp32's 100 (no fast fp16 kernel on this cpu); "
                       "task.dtypes=[fp16] measures it anyway"]


@pytest.mark.parametrize("seconds, text", [(0.4, "<1 s"), (42, "42 s"), (185, "3 min 5 s"), (7800, "2 h 10 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    from primus_hydra.benchmark.progress import duration_text

    assert duration_text(seconds) == text


def test_a_long_case_logs_a_line_with_the_time_left_every_heartbeat(monkeypatch, caplog):
    from primus_hydra.benchmark import progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False)
    with caplog.at_level(logging.INFO, logger="primus_hydra.benchmark"), \
            progress.Progress(True, "gemm", [60.0, 60.0]) as shown:
        shown.start("gemm 2048^3 fp16", calls=13)
        clock[0] += progress.HEARTBEAT_S - 1
        shown.tick()
        clock[0] += 1
        shown.tick()
    assert [r.getMessage() for r in caplog.records] == [
        "benchmark gemm: case 1/2 (gemm 2048^3 fp16), call 2/13, 10 s elapsed, about 1 min 50 s left"]


# -- preflight messages ------------------------------------------------------------------------------------------------
def test_a_checkpoint_dir_that_cannot_be_created_is_named_with_the_folder_that_failed():
    from primus_hydra.benchmark.preflight_checks import folder_checks

    checks = {check.name: check for check in folder_checks("checkpoint_dir", Path("/proc/xx/ckpt"))}
    assert (checks["writable.checkpoint_dir"].status, checks["writable.checkpoint_dir"].detail) == (
        "FAIL", "/proc/xx/ckpt: cannot create /proc/xx: No such file or directory")


def test_free_space_of_a_missing_folder_names_where_it_was_measured():
    from primus_hydra.benchmark.preflight_checks import folder_checks

    checks = {check.name: check for check in folder_checks("checkpoint_dir", Path("/proc/xx/ckpt"))}
    assert checks["disk.checkpoint_dir"].detail.endswith(
        " GiB free under /proc (/proc/xx/ckpt does not exist yet) (FAIL below 1, WARN below 10)")


def test_a_missing_folder_that_can_be_created_passes_and_is_removed_again(tmp_path):
    from primus_hydra.benchmark.preflight_checks import folder_checks

    checks = {check.name: check for check in folder_checks("output_root", tmp_path / "a" / "b")}
    assert (checks["writable.output_root"].status, checks["writable.output_root"].detail) == (
        "PASS", f"{tmp_path / 'a' / 'b'} can be created and written")
    assert list(tmp_path.iterdir()) == []


# -- collectives ----------------------------------------------------------------------------------------------------
def test_a_size_that_is_not_a_multiple_of_the_ranks_says_how_it_was_rounded():
    case = CollectiveCase("all_reduce", 1001, "intra_node", 2)
    assert (elements_for(1001, 2), case.buffer_bytes) == (252, 1008)
    assert rounding_note(case) == ("1,001 B measured as 1,008 B: 252 float32 elements, a multiple of the group's 2 "
                                   "ranks")


def test_rounded_sizes_are_a_warning_at_prepare(compose_config, machine):
    machine(ram_gib=16)
    job = BenchmarkTask.prepare_job(compose_config("task=benchmark", "task.suite=collectives", "platform.device=cpu",
                                                   "launch.nproc_per_node=2", "task.sizes=[1001,4096]"), None)
    assert [w for w in job.warnings if w.startswith("task.sizes")] == [
        "task.sizes: 1,001 B measured as 1,008 B: 252 float32 elements, a multiple of the group's 2 ranks"]


@pytest.mark.parametrize("ranks, chunk", [(2, 2 ** 20), (8, 2 ** 24), (1024, 3 * 2 ** 10), (6000, 4096)])
def test_the_value_period_keeps_every_sum_exact_and_divides_no_chunk(ranks, chunk):
    from primus_hydra.benchmark.collectives import value_period

    period = value_period(ranks, chunk)
    assert chunk % period != 0 and period > 2
    assert ranks * (period - 1) + ranks * (ranks - 1) // 2 < 2 ** 24 or period <= 5


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"])
def test_a_misplaced_chunk_is_counted_element_by_element(op, one_rank_group, monkeypatch):
    import torch

    from primus_hydra.benchmark.collectives import Collective

    collective = Collective(CollectiveCase(op, 4096, "intra_node", 1), None, torch.device("cpu"))
    assert collective.mismatches() == 0
    monkeypatch.setenv("PRIMUS_BENCHMARK_FAULT", "misplace_chunk:0")
    assert collective.mismatches() == 1024  # every element of both swapped halves


def test_two_nodes_probing_one_missing_shared_folder_at_once_both_pass(tmp_path, monkeypatch):
    """The folder another node made between this node's look and its mkdir is a folder, not a failure."""
    from primus_hydra.benchmark import preflight_checks

    folder = tmp_path / "shared" / "checkpoints"
    real_mkdir = Path.mkdir

    def other_node_first(path, *args, **kwargs):
        if path == folder and not folder.exists():
            real_mkdir(path)  # the other node, just before us
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", other_node_first)
    assert preflight_checks.write_probe(folder, ".probe_node1") is None
