"""A small Primus-shaped checkout written for the import tests (not copied from Primus): module and model presets
with `extends:` chains and env defaults, and one experiment per framework shape, each a few keys long."""
from __future__ import annotations

import textwrap
from pathlib import Path

META = """\
work_group: ${PRIMUS_TEAM:amd}
user_name: ${PRIMUS_USER:root}
exp_name: ${PRIMUS_EXP_NAME:test}
workspace: ./output
"""

# one trainer module of the fixture checkout, for tests that write their own experiments (append `    overrides: ...`)
TRAINER = """\
modules:
  pre_trainer:
    framework: megatron
    config: pre_trainer.yaml
    model: llama3_8B.yaml
"""

FILES = {
    # -- module presets ------------------------------------------------------------------------------------------
    "primus/configs/modules/module_base.yaml": """\
        trainable: true
        sink_level: null
        stderr_sink_level: INFO
        """,
    "primus/configs/modules/megatron/primus_turbo.yaml": """\
        enable_primus_turbo: false
        use_turbo_attention: false
        """,
    "primus/configs/modules/megatron/trainer_base.yaml": """\
        extends:
          - ../module_base.yaml
          - primus_turbo.yaml
        micro_batch_size: 2
        global_batch_size: 16
        bf16: true
        fp16: false
        lr: 2.0e-5
        min_lr: 0.0
        lr_decay_style: cosine
        lr_warmup_iters: 40
        lr_decay_iters: null
        weight_decay: 0.01
        adam_beta1: 0.9
        adam_beta2: 0.95
        adam_eps: 1.0e-8
        clip_grad: 1.0
        seed: 1234
        use_distributed_optimizer: true
        sequence_parallel: true
        tensor_model_parallel_size: 1
        pipeline_model_parallel_size: 1
        context_parallel_size: 1
        expert_model_parallel_size: 1
        mock_data: true
        save: null
        log_interval: 1
        num_layers: 2          # shadows the model preset's (Primus keeps the module preset's)
        """,
    "primus/configs/modules/megatron/pre_trainer.yaml": """\
        extends:
          - trainer_base.yaml
        train_iters: 1000
        seq_length: 1024
        stage: pretrain
        eval_iters: 0            # Primus's pre_trainer: no evaluation
        eval_interval: 1000
        split: null
        """,
    "primus/configs/modules/torchtitan/pre_trainer.yaml": """\
        extends:
          - ../module_base.yaml
        optimizer: {name: AdamW, lr: 8.0e-4, eps: 1.0e-8, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
        lr_scheduler: {warmup_steps: 200, decay_type: linear, min_lr_factor: 0.0}
        training: {mock_data: true, local_batch_size: 8, global_batch_size: -1, seq_len: 2048, steps: 10000,
                   max_norm: 1.0, mixed_precision_param: bfloat16}
        parallelism: {data_parallel_replicate_degree: 1, data_parallel_shard_degree: -1, tensor_parallel_degree: 1,
                      pipeline_parallel_degree: 1, context_parallel_degree: 1, expert_parallel_degree: 1}
        checkpoint: {enable: false, interval: 500}
        activation_checkpoint: {mode: selective}
        compile: {enable: false}
        metrics: {log_freq: 10}
        debug: {seed: 42}
        """,
    "primus/configs/modules/maxtext/pre_trainer.yaml": """\
        extends:
          - ../module_base.yaml
        steps: 100
        per_device_batch_size: 2
        max_target_length: 2048
        dtype: bfloat16
        dataset_type: synthetic
        enable_checkpointing: false
        log_period: 10
        remat_policy: full
        attention: dot_product
        ici_tensor_parallelism: 1
        ici_pipeline_parallelism: 1
        ici_fsdp_parallelism: -1
        ici_expert_parallelism: 1
        scan_layers: true
        """,
    "primus/configs/modules/megatron_bridge/pretrain_trainer.yaml": """\
        extends:
          - ../module_base.yaml
        stage: pretrain
        train_iters: 100
        micro_batch_size: 1
        global_batch_size: 8
        seq_length: 2048
        lr: 3.0e-4
        min_lr: 3.0e-5
        lr_warmup_iters: 10
        tensor_model_parallel_size: 1
        pipeline_model_parallel_size: 1
        context_parallel_size: 1
        mock: true
        """,
    # -- model presets -------------------------------------------------------------------------------------------
    "primus/configs/models/megatron/language_model.yaml": """\
        normalization: RMSNorm
        swiglu: true
        position_embedding_type: rope
        untie_embeddings_and_output_weights: true
        add_qkv_bias: false
        qk_layernorm: false
        group_query_attention: false
        num_query_groups: null
        kv_channels: null
        norm_epsilon: 1.0e-5
        use_rope_scaling: false
        multi_latent_attention: false
        num_experts: null
        init_method_std: 0.02
        hidden_dropout: 0.0
        attention_dropout: 0.0
        masked_softmax_fusion: false
        """,
    "primus/configs/models/megatron/llama_base.yaml": """\
        extends:
          - language_model.yaml
        rotary_base: 10000
        max_position_embeddings: 4096
        """,
    "primus/configs/models/megatron/llama3_8B.yaml": """\
        extends:
          - llama_base.yaml
        tokenizer_type: HuggingFaceTokenizer
        tokenizer_model: meta-llama/Meta-Llama-3-8B
        num_layers: 32
        hidden_size: 4096
        ffn_hidden_size: 14336
        num_attention_heads: 32
        group_query_attention: true
        num_query_groups: 8
        rotary_base: 500000
        max_position_embeddings: 8192
        attention_softmax_in_fp32: true   # a Megatron argument no table maps: passed through
        """,
    "primus/configs/models/megatron/odd_llama.yaml": """\
        extends:
          - llama_base.yaml
        num_layers: 2
        hidden_size: 320
        ffn_hidden_size: 864
        num_attention_heads: 5
        """,
    "primus/configs/models/torchtitan/llama3.1_8B.yaml": """\
        model: {name: llama3, flavor: 8B, hf_assets_path: meta-llama/Llama-3.1-8B, converters: [primus_turbo]}
        """,
    "primus/configs/models/maxtext/llama2_7B.yaml": """\
        model_name: llama2-7b
        tokenizer_path: meta-llama/Llama-2-7b-hf
        """,
    "primus/configs/models/megatron_bridge/odd_llama.yaml": """\
        recipe: llama.llama3
        flavor: odd_llama_pretrain_config
        """,
    "primus/configs/models/megatron_bridge/llama3_8b.yaml": """\
        recipe: llama.llama3
        flavor: llama3_8b_pretrain_config
        hf_path: meta-llama/Meta-Llama-3-8B
        """,
    # its name is no zoo preset's: the recipe's flavor names the model (Bridge's MambaModelProvider130M)
    "primus/configs/models/megatron_bridge/mamba_130M.yaml": """\
        recipe: mamba.mamba2
        flavor: mamba2_130m_pretrain_config
        """,
}

EXPERIMENTS = {
    # env defaults typed (int, bool, null), overrides adding a key, a shadowed model key, a top-level stray key
    "examples/megatron/llama3_8B-pretrain.yaml": META + """\
        lr: 9.9                  # top level: Primus ignores it
        modules:
          pre_trainer:
            framework: megatron
            config: pre_trainer.yaml
            model: ${PRIMUS_MODEL:llama3_8B}.yaml
            overrides:
              train_iters: 50
              global_batch_size: 128
              seq_length: ${PRIMUS_SEQ_LENGTH:4096}
              tensor_model_parallel_size: ${PRIMUS_TP:2}
              use_distributed_optimizer: ${PRIMUS_DIST_OPT:false}
              lr_decay_iters: ${PRIMUS_DECAY:null}
              lr: 1.0e-5
              overlap_grad_reduce: true      # a key no preset has: added, passed through
              use_turbo_attention: true      # a Primus extension: listed in the header
        """,
    "examples/megatron/odd_llama-pretrain.yaml": META + """\
        env:
          NCCL_DEBUG: WARN
          GPUS_PER_NODE: 4
        modules:
          pre_trainer:
            framework: megatron
            config: pre_trainer.yaml
            model: odd_llama.yaml
            overrides: {num_layers: 2, train_iters: 5, norm_epsilon: 1.0e-6, eval_interval: 5, eval_iters: 2,
                        split: "90,10,0"}
        """,
    "examples/torchtitan/llama3.1_8B-pretrain.yaml": META + """\
        modules:
          pre_trainer:
            framework: torchtitan
            config: pre_trainer.yaml
            model: llama3.1_8B.yaml
            overrides:
              training: {local_batch_size: 4, steps: 50, seq_len: 8192}
              optimizer: {lr: 3.0e-4}
              lr_scheduler: {warmup_steps: 10, decay_ratio: 0.8}
              parallelism: {tensor_parallel_degree: 2}
              profiling: {enable_profiling: false}
        """,
    "examples/maxtext/llama2_7B-pretrain.yaml": META + """\
        modules:
          pre_trainer:
            framework: maxtext
            config: pre_trainer.yaml
            model: llama2_7B.yaml
            overrides: {steps: 20, per_device_batch_size: 4, max_target_length: 4096, run_name: test_run}
        """,
    "examples/megatron_bridge/llama3_8b-pretrain.yaml": META + """\
        modules:
          pre_trainer:
            framework: megatron_bridge
            config: pretrain_trainer.yaml
            model: llama3_8b.yaml
            overrides: {train_iters: 30, global_batch_size: 32}
        """,
    "examples/megatron_bridge/mamba_130M-pretrain.yaml": META + """\
        modules:
          pre_trainer:
            framework: megatron_bridge
            config: pretrain_trainer.yaml
            model: mamba_130M.yaml
            overrides: {train_iters: 50, global_batch_size: 32, micro_batch_size: 4, seq_length: 2048, mock: true}
        """,
    # a recipe pointer whose numbers only Primus's Megatron preset of the same name has
    "examples/megatron_bridge/odd_llama-pretrain.yaml": META + """\
        modules:
          pre_trainer:
            framework: megatron_bridge
            config: pretrain_trainer.yaml
            model: odd_llama.yaml
            overrides: {train_iters: 10, seq_length: 8192}
        """,
}


def write_primus_tree(root: Path, files: dict | None = None) -> Path:
    """The fixture checkout under root (plus any extra {relative path: text}); returns root."""
    for relative, text in {**FILES, **EXPERIMENTS, **(files or {})}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if not text.startswith(META) else
                        META + textwrap.dedent(text[len(META):]))
    return root


def import_megatron_examples(tree: Path, names, out: Path) -> tuple[Path, dict]:
    """task=import of examples/megatron/<name>.yaml of a tree write_primus_tree made: (out, {name: its result})."""
    from primus_hydra.tasks.import_session import import_files

    files = [tree / "examples" / "megatron" / f"{name}.yaml" for name in names]
    return out, {result.source.stem: result for result in import_files(files, tree / "examples", tree, out, {})}
