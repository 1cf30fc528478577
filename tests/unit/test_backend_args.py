"""The external backends' adapters: native arguments through the real runtime (task.dry_run=true writes
backend_args.yaml), their one-line rules, and how a run fails when the library is missing or not integrated."""
from __future__ import annotations

import sys

import pytest
import yaml

from helpers.compose import run_job
from primus_hydra.backends.base import load_adapter
from primus_hydra.backends.torchtitan.args import llama_ffn_hidden_dim, llama_ffn_rounding
from primus_hydra.config.layout import configured_world_size, parallel_layout
from primus_hydra.errors import ConfigValidationError

EIGHT_GPUS = ("launch.nproc_per_node=8", "module.data.source=mock", "module.seq_length=1024", "module.global_batch_size=64")


def dry_run(compose_config, run_dir, *overrides: str) -> dict:
    run_job(compose_config("task.dry_run=true", *overrides), run_dir)
    return yaml.safe_load((run_dir / "backend_args.yaml").read_text())


def adapter_failures(compose_config, *overrides: str) -> list[str]:
    cfg = compose_config(*overrides)
    return load_adapter(cfg, parallel_layout(cfg, configured_world_size(cfg))).validate()


# -- megatron -------------------------------------------------------------------------------------------------
def test_megatron_llama3_8b_architecture_uses_megatron_argument_names(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "backend=megatron", "model=llama3_8b", *EIGHT_GPUS)
    assert {k: args[k] for k in (
        "hidden_size", "ffn_hidden_size", "num_layers", "num_attention_heads", "num_query_groups",
        "group_query_attention", "kv_channels", "max_position_embeddings", "vocab_size", "rotary_base",
    )} == {
        "hidden_size": 4096, "ffn_hidden_size": 14336, "num_layers": 32, "num_attention_heads": 32,
        "num_query_groups": 8, "group_query_attention": True, "kv_channels": 128, "max_position_embeddings": 8192,
        "vocab_size": 128256, "rotary_base": 500000,
    }
    assert (args["normalization"], args["swiglu"], args["position_embedding_type"]) == ("RMSNorm", True, "rope")
    assert args["untie_embeddings_and_output_weights"] is True
    assert args["add_bias_linear"] is False and args["add_qkv_bias"] is False
    assert "num_experts" not in args and "multi_latent_attention" not in args


def test_megatron_parallel_and_training_arguments_follow_the_overrides(compose_config, tmp_path):
    args = dry_run(
        compose_config, tmp_path, "backend=megatron", "model=llama3_8b", *EIGHT_GPUS,
        "module.parallel.tp=2", "module.parallel.pp=2", "module.micro_batch_size=2", "module.train_iters=30",
        "module.lr=2e-4", "module.min_lr=2e-5", "module.warmup_iters=5", "module.precision=bf16",
    )
    assert (args["tensor_model_parallel_size"], args["pipeline_model_parallel_size"]) == (2, 2)
    assert (args["context_parallel_size"], args["expert_model_parallel_size"]) == (1, 1)
    assert (args["micro_batch_size"], args["global_batch_size"], args["seq_length"]) == (2, 64, 1024)
    assert (args["train_iters"], args["lr"], args["min_lr"], args["lr_warmup_iters"]) == (30, 2e-4, 2e-5, 5)
    assert (args["lr_decay_iters"], args["lr_decay_style"]) == (30, "cosine")
    assert (args["bf16"], args["fp16"], args["use_distributed_optimizer"]) == (True, False, True)
    assert args["transformer_impl"] == "transformer_engine"


def test_megatron_deepseek_v2_lite_gets_moe_and_mla_arguments(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "backend=megatron", "model=deepseek_v2_lite", *EIGHT_GPUS, "module.parallel.ep=8")
    assert {k: args[k] for k in (
        "num_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq",
        "moe_router_score_function", "moe_router_pre_softmax", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
        "moe_router_num_groups", "expert_model_parallel_size",
    )} == {
        "num_experts": 64, "moe_router_topk": 6, "moe_ffn_hidden_size": 1408, "moe_shared_expert_intermediate_size": 2816,
        "moe_layer_freq": "([0]*1+[1]*26)", "moe_router_score_function": "softmax", "moe_router_pre_softmax": True,
        "moe_router_load_balancing_type": "seq_aux_loss", "moe_aux_loss_coeff": 0.001, "moe_router_num_groups": None,
        "expert_model_parallel_size": 8,
    }
    assert {k: args[k] for k in ("multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")} == {
        "multi_latent_attention": True, "q_lora_rank": None, "kv_lora_rank": 512, "qk_head_dim": 128,
        "qk_pos_emb_head_dim": 64, "v_head_dim": 128,
    }
    assert (args["rope_type"], args["rotary_scaling_factor"], args["mscale"]) == ("yarn", 40.0, 0.707)


def test_megatron_llama31_rope_scaling_maps_to_use_rope_scaling(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "backend=megatron", "model=llama3.1_8b", *EIGHT_GPUS)
    assert (args["use_rope_scaling"], args["rope_scaling_factor"]) == (True, 8.0)


def test_megatron_extra_args_are_merged_last_and_win(compose_config, tmp_path):
    args = dry_run(
        compose_config, tmp_path, "backend=megatron", "model=llama3_8b", *EIGHT_GPUS,
        "+backend.extra_args.hidden_dropout=0.1", "+backend.extra_args.moe_grouped_gemm=true",
    )
    assert (args["hidden_dropout"], args["moe_grouped_gemm"]) == (0.1, True)


def test_megatron_fsdp_uses_torch_fsdp2_without_the_distributed_optimizer(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "backend=megatron", "model=llama3_8b", *EIGHT_GPUS, "module.parallel.fsdp=true")
    assert (args["use_torch_fsdp2"], args["use_distributed_optimizer"], args["gradient_accumulation_fusion"]) == (True, False, False)


# -- torchtitan -----------------------------------------------------------------------------------------------
def test_torchtitan_job_config_sections_for_llama3_8b(compose_config, tmp_path):
    job = dry_run(
        compose_config, tmp_path, "backend=torchtitan", "model=llama3_8b", *EIGHT_GPUS,
        "module.parallel.tp=2", "module.parallel.fsdp=true", "module.micro_batch_size=4", "module.train_iters=40",
        "module.lr=3e-4", "module.min_lr=3e-5", "module.warmup_iters=4",
    )
    assert {k: job["model"][k] for k in ("name", "flavor")} == {"name": "llama3", "flavor": "8B"}
    assert job["optimizer"]["name"] == "AdamW" and job["optimizer"]["lr"] == 3e-4
    assert job["lr_scheduler"] == {"warmup_steps": 4, "decay_type": "cosine", "min_lr_factor": pytest.approx(0.1), "total_steps": None}
    assert {k: job["training"][k] for k in ("local_batch_size", "global_batch_size", "seq_len", "steps", "dataset")} == {
        "local_batch_size": 4, "global_batch_size": 64, "seq_len": 1024, "steps": 40, "dataset": "primus_hydra_mock",
    }
    assert job["parallelism"] == {
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 4, "tensor_parallel_degree": 2,
        "pipeline_parallel_degree": 1, "context_parallel_degree": 1, "expert_parallel_degree": 1,
    }
    assert job["job"]["dump_folder"] == str(tmp_path) and job["debug"]["seed"] == 1234
    assert job["model_args"]["dim"] == 4096 and job["model_args"]["n_kv_heads"] == 8
    assert job["model"]["hf_assets_path"] == str(tmp_path / ".primus" / "tokenizer")  # the byte tokenizer written there
    assert job["checkpoint"] == {"enable": False} and job["metrics"] == {"log_freq": 1, "enable_tensorboard": False,
                                                                "disable_color_printing": True}


@pytest.mark.parametrize("dim, ffn", [(4096, 14336), (8192, 28672), (16384, 53248), (256, 688), (4096, 11008), (5, 7)])
def test_torchtitan_ffn_rounding_reproduces_the_preset_width(dim, ffn):
    multiple_of, multiplier = llama_ffn_rounding(dim, ffn)
    assert llama_ffn_hidden_dim(dim, multiple_of, multiplier) == ffn


def test_torchtitan_llama3_8b_rounding_is_metas_1024_and_1_3():
    assert llama_ffn_rounding(4096, 14336) == (1024, 1.3)


# -- maxtext --------------------------------------------------------------------------------------------------
def test_maxtext_config_for_llama3_8b(compose_config, tmp_path):
    config = dry_run(
        compose_config, tmp_path, "backend=maxtext", "model=llama3_8b", *EIGHT_GPUS,
        "module.parallel.tp=2", "module.micro_batch_size=2", "module.lr=3e-5", "module.min_lr=3e-6",
    )
    assert {k: config[k] for k in (
        "base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_mlp_dim", "base_num_decoder_layers",
        "head_dim", "vocab_size", "max_target_length", "learning_rate", "rope_max_timescale", "dataset_type",
    )} == {
        "base_emb_dim": 4096, "base_num_query_heads": 32, "base_num_kv_heads": 8, "base_mlp_dim": 14336,
        "base_num_decoder_layers": 32, "head_dim": 128, "vocab_size": 128256, "max_target_length": 1024,
        "learning_rate": 3e-5, "rope_max_timescale": 500000, "dataset_type": "synthetic",
    }
    # 64 sequences = 2 per dp rank (dp=4) x 8 accumulation steps; per device: 2 * 4 / 8 GPUs
    assert (config["per_device_batch_size"], config["gradient_accumulation_steps"]) == (1.0, 8)
    # the data axis is MaxText's -1, "the rest of the node": 8 devices / tp 2 = 4, on any device count
    assert (config["ici_tensor_parallelism"], config["ici_data_parallelism"], config["ici_fsdp_parallelism"]) == (2, -1, 1)
    assert config["learning_rate_final_fraction"] == pytest.approx(0.1)


def test_maxtext_deepseek_gets_moe_and_mla_keys(compose_config, tmp_path):
    config = dry_run(compose_config, tmp_path, "backend=maxtext", "model=deepseek_v2_lite", *EIGHT_GPUS, "module.parallel.ep=8")
    assert (config["decoder_block"], config["attention_type"], config["q_lora_rank"]) == ("deepseek", "mla", 0)
    assert (config["num_experts"], config["num_experts_per_tok"], config["first_num_dense_layers"]) == (64, 6, 1)
    assert (config["ici_expert_parallelism"], config["ici_data_parallelism"]) == (8, -1)  # the rest: 8 / ep 8


@pytest.mark.parametrize("model, block", [("qwen3_8b", "qwen3"), ("qwen3_30b_a3b", "qwen3_moe")])
def test_maxtext_qwen3_with_experts_is_its_moe_block(compose_config, tmp_path, model, block):
    """MaxText's qwen3 decoder block is the dense layer: a Qwen3 MoE needs its qwen3_moe block."""
    config = dry_run(compose_config, tmp_path, "backend=maxtext", f"model={model}", *EIGHT_GPUS)
    assert config["decoder_block"] == block


@pytest.mark.parametrize("backend", ["megatron", "torchtitan", "maxtext"])
def test_module_peft_on_a_backend_without_adapters_is_one_line(compose_config, backend):
    cfg = compose_config(f"backend={backend}", "module.peft.method=lora")
    assert load_adapter(cfg, parallel_layout(cfg, 1)).peft_failures() == [
        f"module.peft.method=lora: backend={backend} trains no adapters; use backend=torch or megatron_bridge "
        "(Megatron-Bridge's LoRA), or module.peft.method=null to train every weight"]


@pytest.mark.parametrize("overrides, line", [
    (["module.peft.target_modules=[linear_qkv,router]"],
     "module.peft.target_modules: 'router' is no LoRA target; allowed: linear_qkv, linear_proj, linear_fc1, linear_fc2"),
    (["module.parallel.tp=2", "launch.nproc_per_node=2"],
     "module.peft.method=lora: backend=torch adapts replicated models only (data parallel); got tp=2, pp=1, fsdp=false"),
    (["model=deepseek_v2_lite"], "module.peft.method=lora: backend=torch has no LoRA targets in multi-latent attention "
                                 "(model deepseek_v2_lite); use backend=megatron_bridge"),
])
def test_what_backend_torch_lora_does_not_cover_is_one_line(compose_config, overrides, line):
    cfg = compose_config("module.peft.method=lora", *overrides)
    assert line in load_adapter(cfg, parallel_layout(cfg, 2 if "launch.nproc_per_node=2" in overrides else 1)).validate()


# -- megatron_bridge, hummingbirdxt ---------------------------------------------------------------------------
def test_megatron_bridge_sections_carry_the_canonical_values(compose_config, tmp_path):
    config = dry_run(compose_config, tmp_path, "backend=megatron_bridge", "model=llama3.1_8b", *EIGHT_GPUS, "module.parallel.tp=2")
    assert config["recipe"]["name"] == "llama.llama31_8b"
    assert config["model"]["tensor_model_parallel_size"] == 2
    assert config["train"]["global_batch_size"] == 64 and config["tokenizer"]["tokenizer_type"] == "NullTokenizer"
    assert config["checkpoint"]["save"] == str(tmp_path / "checkpoints")


def test_hummingbirdxt_translates_the_optimizer_and_output_folder(compose_config, tmp_path):
    args = dry_run(compose_config, tmp_path, "backend=hummingbirdxt", "module=post_trainer", "module.data.path=/data/train.csv")
    assert (args["lr"], args["batch_size"], args["data_path"]) == (1e-4, 4, "/data/train.csv")
    assert args["logdir"] == str(tmp_path / "checkpoints")


# -- rules ----------------------------------------------------------------------------------------------------
def test_torchtitan_refuses_what_its_trainer_cannot_build(compose_config):
    failures = adapter_failures(compose_config, "backend=torchtitan", "module.data.source=mock", "model.tie_embeddings=true",
                                "module.parallel.pp=2", "launch.nproc_per_node=2")
    assert failures == [
        "model.tie_embeddings=true: torchtitan's llama3 has no tied embeddings (model=llama_tiny); set model.tie_embeddings=false",
        "module.parallel.pp=2: backend=torchtitan runs in this project's loop, which drives torchtitan's train_step "
        "without its pipeline schedules yet; use pp=1"]


def test_external_backends_need_a_text_path(compose_config):
    failures = adapter_failures(compose_config, "backend=maxtext")
    assert len(failures) == 1 and failures[0].startswith("module.data.source=text needs module.data.path with backend=maxtext")


def test_megatron_fsdp_rejects_pipeline_parallelism(compose_config):
    failures = adapter_failures(compose_config, "backend=megatron", "module.data.source=mock", "module.parallel.fsdp=true", "module.parallel.pp=2", "launch.nproc_per_node=4",
                                "module.global_batch_size=16")
    assert failures == ["module.parallel.fsdp=true: Megatron's torch FSDP2 supports pp=1 and ep=1 only (pp=2, ep=1)"]


def test_hummingbirdxt_only_post_trains(compose_config, tmp_path):
    cfg = compose_config("backend=hummingbirdxt", "module.data.source=mock", "task.dry_run=true")
    with pytest.raises(ConfigValidationError, match=r"module.stage=pretrain: backend=hummingbirdxt supports sft"):
        run_job(cfg, tmp_path)


# -- real runs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend, module", [("maxtext", "MaxText")])
def test_a_missing_library_is_named_with_how_to_get_it_without_importing_anything(compose_config, backend, module):
    cfg = compose_config(f"backend={backend}", "module.data.source=mock")
    (message,) = load_adapter(cfg, parallel_layout(cfg, 1)).requirement_failures()
    assert message.startswith(f"backend={backend} needs {module}, which cannot be found")
    assert "backend.path=<dir>, $BACKEND_PATH or third_party/" in message


def test_a_library_in_a_source_checkout_is_found_without_importing_it(compose_config, tmp_path):
    checkout = tmp_path / "maxtext"
    (checkout / "src" / "MaxText").mkdir(parents=True)
    (checkout / "src" / "MaxText" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    cfg = compose_config("backend=maxtext", "module.data.source=mock", f"backend.path={checkout}")
    assert load_adapter(cfg, parallel_layout(cfg, 1)).requirement_failures() == []
    assert "MaxText" not in sys.modules


@pytest.mark.parametrize("backend", ["maxtext"])
def test_a_real_run_of_a_backend_not_integrated_yet_stops_before_it_starts(compose_config, tmp_path, backend):
    cfg = compose_config(f"backend={backend}", "module.data.source=mock")
    with pytest.raises(ConfigValidationError) as error:
        run_job(cfg, tmp_path / "run")
    assert error.value.failures == [
        f"backend={backend}: training through {load_adapter(cfg, parallel_layout(cfg, 1)).library} is not integrated "
        "yet in this release; task.dry_run=true exports the translated arguments to backend_args.yaml in the run dir"]
    assert not (tmp_path / "run").exists()


def test_torchtitan_needs_triton_too_and_names_the_extra(compose_config):
    """torchtitan imports triton without declaring it: a real run checks both and names the extra that has them."""
    adapter = load_adapter(compose_config("backend=torchtitan"), parallel_layout(compose_config("backend=torchtitan"), 1))
    assert adapter.required_modules == ("torchtitan", "triton")
    assert "pip install 'primus-hydra[torchtitan]'" in adapter.install_hint


@pytest.mark.parametrize("text, layers, pattern", [
    ("([0]*1+[1]*3)", 4, [0, 1, 1, 1]),
    ("([1]*3+[0])*2", 8, [1, 1, 1, 0, 1, 1, 1, 0]),  # Primus's kimi_k3 linear_attention_freq
    ("[1,0,1]", 3, [1, 0, 1]),
    (2, 4, 2),
])
def test_layer_patterns_read_as_megatron_lms_parser_reads_them(text, layers, pattern):
    from primus_hydra.backends.megatron.core_config import layer_pattern

    assert layer_pattern(text, layers, "linear_attention_freq") == pattern


def test_a_layer_pattern_of_another_length_is_one_line():
    from primus_hydra.backends.megatron.core_config import layer_pattern

    with pytest.raises(ValueError, match=r"linear_attention_freq='\(\[1\]\*3\+\[0\]\)\*2' names 8 layers, the model "
                                         r"has 6"):
        layer_pattern("([1]*3+[0])*2", 6, "linear_attention_freq")
