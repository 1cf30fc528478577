"""The built-in Megatron patches (backends/megatron/patches.py): registered by id, run by the real runtime in
build_args, and never overriding what the user set in backend.extra_args."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from helpers.compose import run_job
from primus_hydra.patches.registry import REGISTRY, PatchContext

PATCHES_MODULE = "primus_hydra.backends.megatron.patches"
MEGATRON = ("backend=megatron", "model=llama3_8b", "launch.nproc_per_node=8", "module.seq_length=1024", "module.global_batch_size=64")


def dry_run(compose_config, run_dir, *overrides: str) -> dict:
    cfg = compose_config("task.dry_run=true", *MEGATRON, *overrides)
    run_job(cfg, run_dir)
    return yaml.safe_load((run_dir / "backend_args.yaml").read_text())


def test_the_megatron_patches_are_registered_with_their_phases():
    __import__(PATCHES_MODULE)
    phases = {p.id: (p.backend, p.phase) for p in REGISTRY.all() if p.id.startswith("megatron.")}
    setup = ("megatron", "setup")
    assert phases == {
        "megatron.args.sequence_parallel_tp1": ("megatron", "build_args"),
        "megatron.args.layernorm_epsilon": ("megatron", "build_args"),
        "megatron.args.checkpoint_path": ("megatron", "build_args"),
        "megatron.args.tensorboard_path": ("megatron", "build_args"),
        "megatron.args.wandb_from_logger": ("megatron", "build_args"),
        "megatron.args.mock_data": ("megatron", "build_args"),
        "megatron.args.text_as_indexed": ("megatron", "build_args"),
        "megatron.env.cuda_device_max_connections": setup,
        **{f"megatron.cpu.{name}": setup for name in ("torch_cuda", "rng_tracker", "tensor_types", "tensor_moves",
                                                     "moe_split_sizes")},
        "megatron.local_spec.sequence_parallel_norm": setup,
        "megatron.moe.router_gemm_without_te": setup,
        "megatron.optimizer.torch_adam_resume": setup,
    }


@pytest.mark.parametrize("version, renamed", [("0.16.1", True), ("0.16.0", True), ("0.15.3", False), ("0.13.1", False)])
def test_norm_epsilon_is_renamed_from_megatron_core_0_16_on(version, renamed):
    """core_v0.16 moved --norm-epsilon's destination to layernorm_epsilon; earlier releases keep norm_epsilon."""
    __import__(PATCHES_MODULE)
    from omegaconf import OmegaConf

    from primus_hydra.patches.runner import run_patches

    cfg = OmegaConf.create({"backend": {"extra_args": {}}})
    ctx = PatchContext(backend="megatron", phase="build_args", backend_version=version, cfg=cfg, run_dir=Path("."),
                       backend_args={"norm_epsilon": 1e-5})
    ran = run_patches(ctx, {"megatron.args.layernorm_epsilon"})
    assert ctx.backend_args == ({"layernorm_epsilon": 1e-5} if renamed else {"norm_epsilon": 1e-5})
    assert ran == (["megatron.args.layernorm_epsilon"] if renamed else [])


@pytest.mark.parametrize("version", ["0.15.3", "0.17.0"])
def test_the_cpu_patches_are_gated_to_the_release_they_were_written_for(version):
    from primus_hydra.backends.megatron.cpu_patches import cpu_support_failure

    assert cpu_support_failure("0.16.1") is None
    assert cpu_support_failure(version) == (
        f"backend=megatron on the CPU: megatron-core {version} is outside the releases the megatron.cpu.* patches were "
        f"written for (0.16.*); install megatron-core==0.16.1 (pip install 'primus-hydra[megatron]') or run on GPUs")


def test_sequence_parallel_is_switched_off_at_tp1(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "module.parallel.sequence_parallel=true")
    assert args["sequence_parallel"] is False


def test_sequence_parallel_is_kept_with_tensor_parallelism(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "module.parallel.sequence_parallel=true", "module.parallel.tp=2")
    assert args["sequence_parallel"] is True


def test_checkpoints_and_tensorboard_go_under_the_run_dir(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "module.checkpoint.interval=25")
    assert (args["save"], args["save_interval"]) == (str(tmp_path / "checkpoints"), 25)
    assert args["tensorboard_dir"] == str(tmp_path / "tensorboard")


def test_an_explicit_checkpoint_dir_is_kept(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "module.checkpoint.dir=/ckpt/llama")
    assert args["save"] == "/ckpt/llama"


def test_save_from_extra_args_wins_over_the_patch(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "+backend.extra_args.save=/elsewhere")
    assert args["save"] == "/elsewhere"


def test_resume_auto_loads_from_the_save_folder(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "module.checkpoint.resume=auto")
    assert args["load"] == args["save"] == str(tmp_path / "checkpoints")


def test_no_checkpoint_folder_when_the_run_saves_none(compose_config, tmp_path):
    args = dry_run(
        compose_config, tmp_path, "module.data.source=mock", "module.checkpoint.interval=0", "module.checkpoint.save_final=false"
    )
    assert args["save"] is None


def test_logger_wandb_gives_megatron_lm_its_wandb_flags(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "logger=wandb", "logger.wandb.project=llm",
                   "logger.wandb.entity=team", "+backend.extra_args.wandb_exp_name=mine")
    assert {key: args[key] for key in args if key.startswith("wandb_")} == {
        "wandb_project": "llm", "wandb_exp_name": "mine", "wandb_save_dir": str(tmp_path / "wandb"),
        "wandb_entity": "team"}


def test_no_tensorboard_dir_when_tensorboard_is_off(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "module.log.tensorboard=false")
    assert args["tensorboard_dir"] is None


def test_mock_data_runs_with_the_null_tokenizer_and_no_data_paths(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "backend.tokenizer_model=meta-llama/Meta-Llama-3-8B")
    assert (args["mock_data"], args["tokenizer_type"], args["tokenizer_model"]) == (True, "NullTokenizer", None)
    assert [args[k] for k in ("data_path", "train_data_path", "valid_data_path", "test_data_path")] == [None] * 4
    assert args["vocab_size"] == 128256


def test_indexed_data_keeps_the_configured_tokenizer_and_megatrons_blend(compose_config, tmp_path):
    args = dry_run(
        compose_config, tmp_path, "module.data.source=indexed", "module.data.path='0.7 /data/c4_text 0.3 /data/code'",
        "backend.tokenizer_model=meta-llama/Meta-Llama-3-8B",
    )
    assert (args["mock_data"], args["tokenizer_type"]) == (False, "HuggingFaceTokenizer")
    assert args["data_path"] == ["0.7", "/data/c4_text", "0.3", "/data/code"]


def test_text_reaches_megatron_lm_as_the_run_dirs_indexed_bytes(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "backend.tokenizer_model=meta-llama/Meta-Llama-3-8B")
    assert args["data_path"] == [str(tmp_path / ".primus" / "megatron_data" / "text_bytes")]
    assert (args["mock_data"], args["tokenizer_type"], args["tokenizer_model"]) == (False, "NullTokenizer", None)


def test_patches_enabled_allowlist_leaves_the_others_out(compose_config, tmp_path, monkeypatch):
    monkeypatch.delenv("PRIMUS_PATCHES", raising=False)
    args = dry_run(compose_config, tmp_path, "module.data.source=mock", "patches.enabled=megatron.args.mock_data")
    assert args["tokenizer_type"] == "NullTokenizer"
    assert args["tensorboard_dir"] is None  # megatron.args.tensorboard_path left out
    assert args["save"] == str(tmp_path / "checkpoints")  # module.checkpoint.dir, as the job was prepared


@pytest.mark.parametrize("fsdp, expected", [(False, "1"), (True, "8")])
def test_cuda_device_max_connections_is_1_or_8_with_fsdp(compose_config, tmp_path, monkeypatch, fsdp, expected):
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    patches = __import__(PATCHES_MODULE, fromlist=["cuda_device_max_connections"])
    cfg = compose_config(*MEGATRON, f"module.parallel.fsdp={str(fsdp).lower()}")
    patches.cuda_device_max_connections(PatchContext("megatron", "setup", None, cfg, tmp_path))
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == expected


def test_cuda_device_max_connections_keeps_the_users_value(compose_config, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4")
    patches = __import__(PATCHES_MODULE, fromlist=["cuda_device_max_connections"])
    patches.cuda_device_max_connections(PatchContext("megatron", "setup", None, compose_config(*MEGATRON), tmp_path))
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "4"
