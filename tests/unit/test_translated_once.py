"""A job's backend arguments are translated once, when it is prepared: the job config its workers load holds them
(a dry run writes that same file), a worker reads them instead of translating, and translates again only when they
were made for another release of its library or another config (backends/translation.py)."""
from __future__ import annotations

import dataclasses
import importlib.metadata
import logging

import pytest
import yaml

from helpers import recording_backend
from primus_hydra.backends.megatron.args import parallel_args
from primus_hydra.backends.torch.adapter import TorchAdapter
from primus_hydra.backends.torch.args import TorchTrainingArgs
from primus_hydra.config.layout import parallel_layout
from primus_hydra.config.values import to_plain
from primus_hydra.launch.job_config import JOB_CONFIG_FILE, load_job_config, write_job_config
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.runtime.train_runtime import DRY_RUN_FILE, PrimusRuntime

RECORDING = ["backend._target_=helpers.recording_backend.RecordingAdapter", "backend.name=recording"]


@pytest.fixture(autouse=True)
def fresh_events():
    recording_backend.EVENTS.clear()


def test_prepare_translates_once_after_the_build_args_patches(compose_config, tmp_path):
    job = prepare(compose_config(*RECORDING), run_dir=tmp_path)
    assert recording_backend.EVENTS == ["adapter.convert_config", "patch:build_args"]
    assert job.translation.arguments == {"hidden_size": 256, "fail_in": None}
    assert job.translation.patches == ("recording.build_args",)


def test_a_worker_that_loads_the_job_config_does_not_translate(compose_config, tmp_path):
    write_job_config(prepare(compose_config(*RECORDING), run_dir=tmp_path), tmp_path)
    recording_backend.EVENTS.clear()
    runtime = PrimusRuntime(load_job_config(tmp_path / JOB_CONFIG_FILE), tmp_path)
    assert runtime.run() == 1.5
    assert "adapter.convert_config" not in recording_backend.EVENTS and "translate" not in runtime.phases
    assert "patch:build_args" not in recording_backend.EVENTS  # applied when the job was prepared: logged, not rerun
    assert "patch applied: recording.build_args [build_args] (when the job was prepared)" in \
        (tmp_path / "logs" / "rank_0.log").read_text()


def test_a_worker_with_another_library_release_translates_again(compose_config, tmp_path, caplog):
    job = prepare(compose_config(*RECORDING), run_dir=tmp_path)
    job.translation = dataclasses.replace(job.translation, library_version="0.1", arguments={"stale": True})
    recording_backend.EVENTS.clear()
    with caplog.at_level(logging.INFO, logger="primus_hydra.runtime.train_runtime"):
        runtime = PrimusRuntime(job, tmp_path)
        runtime.run()
    assert recording_backend.EVENTS[:2] == ["adapter.convert_config", "patch:build_args"]
    assert runtime.backend_args == {"hidden_size": 256, "fail_in": None}
    assert ("backend arguments translated in this process: recording is not installed here, the job was prepared "
            "with 0.1") in caplog.text


def test_a_worker_whose_config_changed_after_prepare_translates_again(compose_config, tmp_path):
    job = prepare(compose_config(*RECORDING), run_dir=tmp_path)
    job.cfg.model.hidden_size = 512  # e.g. what a Slurm node or a requeue changes
    runtime = PrimusRuntime(job, tmp_path)
    runtime.run()
    assert "translate" in runtime.phases and runtime.backend_args["hidden_size"] == 512


def test_a_slurm_nodes_own_rendezvous_keeps_the_prepared_arguments(compose_config, tmp_path):
    job = prepare(compose_config(*RECORDING), run_dir=tmp_path)
    launch = job.cfg.launch  # what each node of a multi-node job sets for itself (launch/slurm/entry.py)
    launch.node_rank, launch.master_addr, launch.master_port, launch.rdzv_backend = 1, "node-0", 29512, "c10d"
    runtime = PrimusRuntime(job, tmp_path)
    runtime.run()
    assert "translate" not in runtime.phases


def test_a_nodes_own_plan_of_an_auto_knob_is_named_when_it_translates_again(compose_config, tmp_path, caplog):
    from primus_hydra.orchestrator.prepare import plan_on_this_node

    # prepared as a Slurm submission is (planned on the nodes): module.data.num_workers stays auto
    job = prepare(compose_config(*RECORDING), run_dir=tmp_path, world_size=1, on_this_machine=False)
    assert job.cfg.module.data.num_workers == "auto"
    with caplog.at_level(logging.INFO, logger="primus_hydra.runtime.train_runtime"):
        PrimusRuntime(plan_on_this_node(job), tmp_path).run()
    assert ("translated in this process: the job's config changed after it was prepared (this node's plan resolved "
            "module.data.num_workers=auto)") in caplog.text


def test_the_dry_run_writes_the_job_config_its_workers_would_get(compose_config, tmp_path):
    import primus_hydra

    cfg = primus_hydra.compose(["backend=megatron", "task.dry_run=true", "module.data.source=mock"])
    primus_hydra.run(cfg, tmp_path / "run")
    document = yaml.safe_load((tmp_path / "run" / JOB_CONFIG_FILE).read_text())
    shipped = document["translated"]["arguments"]
    assert shipped == yaml.safe_load((tmp_path / "run" / DRY_RUN_FILE).read_text())
    assert shipped["tokenizer_type"] == "NullTokenizer"  # after the build_args patches (megatron.args.mock_data)
    assert "megatron.args.mock_data" in document["translated"]["patches"]
    assert document["translated"]["for"]["library_version"] == installed_version("megatron-core")  # for the gate
    assert document["prepared"]["placement"] == "this_process"


def installed_version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_typed_arguments_come_back_from_their_plain_form(compose_config, tmp_path):
    cfg = compose_config("model=moe_tiny")
    args = TorchAdapter(cfg, parallel_layout(cfg, 1), tmp_path).convert_config()
    plain = yaml.safe_load(yaml.safe_dump(to_plain(args)))  # as a job config holds them
    assert TorchTrainingArgs.from_plain(plain) == args


def test_megatron_parallel_arguments_come_from_the_prepared_layout(compose_config):
    cfg = compose_config("backend=megatron")
    layout = dataclasses.replace(parallel_layout(cfg, 1), tp=2, pp=3, cp=1, ep=1, fsdp=True)
    args = parallel_args(cfg, layout)
    assert (args["tensor_model_parallel_size"], args["pipeline_model_parallel_size"], args["use_torch_fsdp2"]) == \
        (2, 3, True)


def test_arguments_that_hold_a_secret_stay_out_of_the_job_config(compose_config, tmp_path):
    cfg = compose_config("backend=maxtext", "module.data.source=mock", "+backend.extra_args.wandb_api_key=s3cr3t-value")
    job = prepare(cfg, run_dir=tmp_path, trains=False)
    assert job.translation.arguments["wandb_api_key"] == "s3cr3t-value"
    path = write_job_config(job, tmp_path)
    assert "s3cr3t-value" not in path.read_text() and load_job_config(path).translation is None  # translated again
