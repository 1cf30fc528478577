"""One test per rule a job is prepared against: the exact line a user sees."""
from __future__ import annotations

import pytest

from primus_hydra.config.error_format import format_compose_error
from primus_hydra.config.validate import validate_config
from primus_hydra.errors import ConfigValidationError
from primus_hydra.orchestrator.prepare import prepare


def failures_for(compose_config, *overrides: str, world_size=None) -> list[str]:
    cfg = compose_config(*overrides)
    with pytest.raises(ConfigValidationError) as info:
        prepare(cfg, world_size=world_size, launched=world_size is not None)
    return info.value.failures


def test_default_config_is_valid(compose_config):
    assert validate_config(compose_config()) == []
    assert prepare(compose_config()).layout.world_size == 1


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["model.hidden_size=250"], "model.hidden_size=250 is not divisible by model.num_attention_heads=8 (or set model.head_dim explicitly)"),
        (["model.num_kv_heads=3"], "model.num_attention_heads=8 is not divisible by model.num_kv_heads=3 (GQA groups must be equal)"),
        (["module.parallel.tp=3", "launch.nproc_per_node=3"], "module.parallel.tp=3 does not divide model.num_attention_heads=8"),
        (["model.num_kv_heads=2", "module.parallel.tp=4", "launch.nproc_per_node=4"],
         "module.parallel.tp=4 does not divide model.num_kv_heads=2 (each TP rank needs whole KV heads)"),
        (["model=moe_tiny", "module.parallel.ep=3", "launch.nproc_per_node=3"], "module.parallel.ep=3 does not divide model.moe.num_experts=8"),
        (["module.parallel.ep=2", "launch.nproc_per_node=2"], "module.parallel.ep=2 needs a MoE model, but model.moe.num_experts=0 (llama_tiny is dense)"),
        (["model=moe_tiny", "model.moe.top_k=9"], "model.moe.top_k=9: must be between 1 and model.moe.num_experts=8"),
        (["module.parallel.pp=3", "launch.nproc_per_node=3"], "module.parallel.pp=3 does not divide model.num_layers=4 (each stage needs equal layers; backend=megatron "
         "can set backend.decoder_first/last_pipeline_num_layers)"),
        (["backend=megatron", "module.parallel.pp=2", "launch.nproc_per_node=2", "backend.decoder_first_pipeline_num_layers=4"],
         "backend.decoder_first_pipeline_num_layers=4, decoder_last_pipeline_num_layers=None: with module.parallel.pp=2 "
         "the other stages must split the rest of model.num_layers=4 evenly, each outer stage holding >= 1 layer (and pp >= 2)"),
        (["module.seq_length=2048"], "module.seq_length=2048 exceeds model.max_position_embeddings=1024"),
        (["module.lr=1e-5", "module.min_lr=1e-4"], "module.lr=1e-05 is below module.min_lr=0.0001; lr must be >= min_lr"),
        (["module.micro_batch_size=0"], "module.micro_batch_size=0: must be >= 1"),
        (["module.adam_beta2=1.5"], "module.adam_beta2=1.5: must be in [0, 1)"),
        (["model.vocab_size=100"], "model.vocab_size=100: module.data.source=text uses byte tokens and needs >= 256"),
        (["module.data.source=tokens"], "module.data.path is required with module.data.source=tokens (a pre-tokenized token file)"),
        (["module.global_batch_size=12"], "module.global_batch_size=12 is not divisible by module.micro_batch_size*dp = 8*1 = 8"),
        (["launch.nproc_per_node=2", "module.parallel.dp=1"], "world size 2 != tp*pp*cp*dp = 1*1*1*1; set module.parallel.dp=auto or 2"),
        (["launch.nproc_per_node=3", "module.parallel.tp=2"],
         "world size 3 (launch.nnodes x launch.nproc_per_node) is not divisible by tp*pp*cp = 2*1*1 = 2"),
        (["module.parallel.cp=2", "launch.nproc_per_node=2", "module.seq_length=250"],
         "module.seq_length=250 must be divisible by 2*cp = 4 (context-parallel load balancing)"),
        (["launch.nproc_per_node=two"], "launch.nproc_per_node=two: must be 'auto' or an integer >= 1"),
    ],
)
def test_rule_reports_one_line(compose_config, overrides, expected):
    assert expected in failures_for(compose_config, *overrides)


@pytest.mark.parametrize("override, expected", [
    ("platform.device=tpu", "platform.device: Invalid value 'tpu', expected one of [auto, cpu, cuda]"),
    ("module.parallel.pp_schedule=zb", "module.parallel.pp_schedule: Invalid value 'zb', expected one of [1f1b, gpipe]"),
    ("launch.mode=mpirun", "launch.mode: Invalid value 'mpirun', expected one of [srun, torchrun]"),
    ("backend=megatron backend.transformer_impl=te", "backend.transformer_impl: Invalid value 'te', expected one of [transformer_engine, local]"),
])
def test_a_choice_outside_its_options_fails_at_composition(compose_config, override, expected):
    with pytest.raises(Exception) as info:
        compose_config(*override.split())
    assert format_compose_error(info.value) == expected


def test_a_warmup_longer_than_the_run_is_a_warning(compose_config):
    (warning,) = validate_config(compose_config("module.train_iters=6"))
    assert warning == ("module.warmup_iters=15 exceeds module.train_iters=6: the learning rate rises for the whole "
                       "run and never reaches module.lr=0.003")


def test_world_size_of_a_running_job_is_used(compose_config):
    failures = failures_for(compose_config, "module.parallel.tp=2", world_size=3)
    assert "world size 3 (launch.nnodes x launch.nproc_per_node) is not divisible by tp*pp*cp = 2*1*1 = 2" in failures


def test_every_failure_is_reported_at_once(compose_config):
    failures = failures_for(compose_config, "module.lr=1e-6", "module.min_lr=1e-5", "module.seq_length=4096", "module.adam_beta2=1.5")
    assert len(failures) >= 3
    assert all("\n" not in line for line in failures)


def test_missing_mandatory_value_names_the_key(compose_config):
    assert failures_for(compose_config, "model.hidden_size=???") == [
        "model.hidden_size: mandatory value is missing (???); set it on the command line, e.g. model.hidden_size=..."
    ]


def test_appended_unknown_key_is_still_rejected(compose_config):
    (line,) = failures_for(compose_config, "+model.moe_load_balancing=false")
    assert line.startswith("model.moe_load_balancing: unknown key (not in ModelConfig); allowed: activation, "
                           "attention_output_bias, attention_sinks, family")


def test_appended_unknown_key_in_nested_moe_block(compose_config):
    (line,) = failures_for(compose_config, "model=moe_tiny", "+model.moe.force_load_balance=true")
    assert line.startswith("model.moe.force_load_balance: unknown key (not in MoEConfig)")


@pytest.mark.parametrize(
    "overrides, expected",
    [(["module.parallel.fsdp=true"], "module.parallel.fsdp=true needs dp > 1 to shard over (world 1 = tp 1 x pp 1)"),
     (["module.parallel.sequence_parallel=true"], "module.parallel.sequence_parallel=true: backend=torch does not implement"),
     (["model.moe.capacity_factor=1.25"], "model.moe.capacity_factor=1.25: backend=torch routes dropless only"),
     (["+backend.extra_args.foo=1"], "backend.extra_args={'foo': 1}: backend=torch has no native arguments")],
)
def test_torch_backend_rejects_what_it_does_not_implement(compose_config, overrides, expected):
    assert any(line.startswith(expected) for line in failures_for(compose_config, *overrides))


def test_a_multi_process_layout_is_not_run_in_one_process(compose_config, tmp_path):
    from primus_hydra.errors import PrimusError
    from primus_hydra.runtime.train_runtime import PrimusRuntime

    job = prepare(compose_config("launch.nproc_per_node=2", "module.global_batch_size=16"))
    with pytest.raises(PrimusError, match=r"world size 2 needs 2 processes, but this one was not started as a rank"):
        PrimusRuntime(job, tmp_path).run()


def test_a_worker_in_another_world_than_prepared_stops(compose_config, tmp_path):
    from primus_hydra.distributed_env import DistributedEnv
    from primus_hydra.errors import PrimusError
    from primus_hydra.runtime.train_runtime import PrimusRuntime

    job = prepare(compose_config("launch.nproc_per_node=2", "module.global_batch_size=16"))
    rank = DistributedEnv(launcher="torchrun", rank=1, world_size=4, local_rank=1, local_world_size=4)
    with pytest.raises(PrimusError, match=r"prepared for world size 2, but runs as rank 1 of 4"):
        PrimusRuntime(job, tmp_path, dist=rank).run()


def test_dp_auto_fills_the_world(compose_config):
    job = prepare(compose_config("launch.nproc_per_node=4", "module.parallel.tp=2", "module.global_batch_size=16"))
    assert (job.layout.world_size, job.layout.dp, job.layout.grad_accum) == (4, 2, 1)
