"""The model zoo (conf/model/*.yaml) and the closed-form calculator (primus_hydra.config.model_math).

Every preset composes and validates; every real model's closed-form count equals its published count exactly.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from primus_hydra.config import model_math
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.validate import validate_config

REPO = Path(__file__).resolve().parents[2]
CONF_DIR = Path(find_conf_dir())

PRESETS = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml"))

# Published total parameter counts. "safetensors metadata" is the parameter count Hugging Face reports for the
# repository's weights (equal to model.safetensors.index.json total_size / 2 for bf16/fp16 checkpoints).
PUBLISHED_TOTALS = {
    # preset: (total parameters, source)
    "llama2_7b": (6_738_415_616, "meta-llama/Llama-2-7b-hf, safetensors metadata"),
    "llama2_13b": (13_015_864_320, "meta-llama/Llama-2-13b-hf, safetensors metadata"),
    "llama2_70b": (68_976_648_192, "meta-llama/Llama-2-70b-hf, safetensors metadata"),
    "llama3_8b": (8_030_261_248, "meta-llama/Meta-Llama-3-8B, safetensors metadata"),
    "llama3_70b": (70_553_706_496, "meta-llama/Meta-Llama-3-70B, safetensors metadata"),
    "llama3.1_8b": (8_030_261_248, "meta-llama/Llama-3.1-8B, safetensors metadata"),
    "llama3.1_70b": (70_553_706_496, "meta-llama/Llama-3.1-70B, safetensors metadata"),
    "llama3.1_405b": (405_853_388_800, "meta-llama/Llama-3.1-405B, safetensors metadata (bf16 total_size 811,706,777,600 B)"),
    "llama3.2_1b": (1_235_814_400, "meta-llama/Llama-3.2-1B, safetensors metadata (tied embeddings)"),
    "llama3.2_3b": (3_212_749_824, "meta-llama/Llama-3.2-3B, safetensors metadata (tied embeddings)"),
    "mixtral_8x7b": (46_702_792_704, "mistralai/Mixtral-8x7B-v0.1, safetensors metadata"),
    "mixtral_8x22b": (140_620_634_112, "mistralai/Mixtral-8x22B-v0.1 (mirror mistral-community/...), safetensors metadata"),
    "qwen2.5_7b": (7_615_616_512, "Qwen/Qwen2.5-7B, safetensors metadata (model card: 7.61B)"),
    "qwen2.5_72b": (72_706_203_648, "Qwen/Qwen2.5-72B, safetensors metadata (model card: 72.7B)"),
    "qwen3_8b": (8_190_735_360, "Qwen/Qwen3-8B, safetensors metadata (model card: 8.2B)"),
    "qwen3_14b": (14_768_307_200, "Qwen/Qwen3-14B, safetensors metadata (model card: 14.8B)"),
    "qwen3_30b_a3b": (30_532_122_624, "Qwen/Qwen3-30B-A3B, safetensors metadata (model card: 30.5B)"),
    "deepseek_v2_lite": (15_706_484_224, "deepseek-ai/DeepSeek-V2-Lite, safetensors metadata (model card: 15.7B)"),
    # README_WEIGHTS.md gives 671B for the main model (the 685B checkpoint adds the 14B MTP module); the exact figure
    # is the per-tensor sum of the HF checkpoint's main-model tensors, including the 58 x 256 e_score_correction_bias
    # and excluding model.layers.61 (MTP) and the FP8 weight_scale_inv tensors.
    "deepseek_v3": (671_026_419_200, "deepseek-ai/DeepSeek-V3 README_WEIGHTS.md 671B; exact: per-tensor sum of the HF main model"),
    # torchtitan's llama4 flavors (no iRoPE): its meta-device build, weights plus the expert-bias buffers
    # (tests/unit/test_import_torchtitan_flavors.py builds them and compares)
    "llama4_17bx16e": (107_769_861_888, "torchtitan 0.2 llama4 17bx16e on the meta device"),
    "llama4_17bx128e": (400_711_852_032, "torchtitan 0.2 llama4 17bx128e on the meta device"),
    # torchtitan's gpt_oss flavors: Hugging Face's openai/gpt-oss weights (20,914,757,184 and 116,829,156,672) plus
    # torchtitan's expert-bias buffers (built on the meta device in tests/unit/test_import_torchtitan_flavors.py)
    "gpt_oss_20b": (20_914_757_952, "torchtitan 0.2 gpt_oss 20b on the meta device"),
    "gpt_oss_120b": (116_829_161_280, "torchtitan 0.2 gpt_oss 120b on the meta device"),
    # Megatron-Bridge's Mamba-2 providers (untied output layer): transformers' Mamba2ForCausalLM of their sizes on the
    # meta device (tests/integration/test_hybrid_megatron_count.py builds them)
    "mamba2_130m": (167_593_920, "Megatron-Bridge MambaModelProvider130M; transformers Mamba2ForCausalLM on meta"),
    "mamba2_370m": (419_819_008, "Megatron-Bridge MambaModelProvider370M; transformers Mamba2ForCausalLM on meta"),
    # Primus's Zebra-Llama providers (multi-latent attention + Mamba-2): megatron-core 0.16's MambaModel of their
    # layers on the meta device (tests/integration/test_hybrid_megatron_count.py)
    "zebra_llama_1b": (1_726_711_808, "Primus ZebraLlama1BModelProvider; megatron-core MambaModel on meta"),
    "zebra_llama_3b": (4_370_893_088, "Primus ZebraLlama3BModelProvider; megatron-core MambaModel on meta"),
    "zebra_llama_8b": (9_642_326_272, "Primus ZebraLlama8BModelProvider; megatron-core MambaModel on meta"),
    # Gemma 4's text models (model cards: 30.7B; 25.2B total): transformers' Gemma4ForCausalLM of MaxText's sizes on
    # the meta device (tests/integration/test_gemma4_count.py builds them)
    "gemma4_31b": (30_697_345_280, "google/gemma-4-31B's text model; transformers Gemma4ForCausalLM on meta"),
    "gemma4_26b": (25_233_141_760, "google/gemma-4-26B-A4B's text model; transformers Gemma4ForCausalLM on meta"),
}

# Published active (per-token) counts. Tolerances: the published figures are rounded to 2-3 significant digits.
PUBLISHED_ACTIVE = {
    # preset: (active parameters, relative tolerance, whether the figure counts the input embedding, source)
    "mixtral_8x7b": (12.9e9, 0.01, True, "Mistral AI, 'Mixtral of experts' blog/paper: 12.9B active"),
    "mixtral_8x22b": (39e9, 0.01, True, "Mistral AI, Mixtral 8x22B announcement: 39B active of 141B"),
    "deepseek_v2_lite": (2.4e9, 0.03, False, "deepseek-ai/DeepSeek-V2-Lite model card: 2.4B activated"),
    "qwen3_30b_a3b": (3.3e9, 0.02, True, "Qwen/Qwen3-30B-A3B model card: 3.3B activated"),
    "deepseek_v3": (36.6e9, 0.005, False, "DeepSeek-V3 README_WEIGHTS.md: 36.6B activated incl. 0.9B output head"),
    "llama4_17bx16e": (17e9, 0.02, True, "Meta's Llama 4 model card: 17B active parameters (Scout, 16 experts)"),
    "llama4_17bx128e": (17e9, 0.02, True, "Meta's Llama 4 model card: 17B active parameters (Maverick, 128 experts)"),
    "gpt_oss_20b": (3.6e9, 0.01, False, "openai/gpt-oss-20b model card: 3.6B active parameters"),
    "gpt_oss_120b": (5.1e9, 0.01, False, "openai/gpt-oss-120b model card: 5.1B active parameters"),
    "gemma4_26b": (3.8e9, 0.01, True, "google/gemma-4-26B-A4B model card: 3.8B active parameters"),
}


_COMPOSED: dict = {}


@pytest.fixture
def zoo(compose_config):
    """zoo(name): the composed full config for model=name (composed once per session; it is the slow part)."""

    def composed(name):
        if name not in _COMPOSED:
            _COMPOSED[name] = compose_config(f"model={name}")
        return _COMPOSED[name]

    return composed


def test_zoo_holds_every_preset():
    expected = {
        "llama_tiny", "moe_tiny", "llama2_7b", "llama2_13b", "llama2_70b", "llama3_8b", "llama3_70b", "llama3.1_8b",
        "llama3.1_70b", "llama3.1_405b", "llama3.2_1b", "llama3.2_3b", "mixtral_8x7b", "mixtral_8x22b",
        "qwen2.5_7b", "qwen2.5_72b", "qwen3_8b", "qwen3_14b", "qwen3_30b_a3b", "deepseek_v2_lite", "deepseek_v3",
        "llama4_17bx16e", "llama4_17bx128e", "gpt_oss_20b", "gpt_oss_120b", "mamba2_130m", "mamba2_370m",
        "zebra_llama_1b", "zebra_llama_3b", "zebra_llama_8b", "gemma4_26b", "gemma4_31b",
    }
    assert expected <= set(PRESETS)
    assert set(PUBLISHED_TOTALS) == set(PRESETS) - {"llama_tiny", "moe_tiny"}


@pytest.mark.parametrize("name", PRESETS)
def test_preset_composes_and_validates(name, compose_config):
    gpt_oss = name.startswith("gpt_oss")  # its layers are torchtitan's gpt_oss's only
    mamba = name.startswith(("mamba", "zebra"))  # megatron-core's MambaModel
    gemma4 = name.startswith("gemma4")  # MaxText's gemma4 decoder block
    cfg = compose_config(f"model={name}", *(["backend=torchtitan"] if gpt_oss else []),
                         *(["backend=megatron"] if mamba else []), *(["backend=maxtext"] if gemma4 else []))
    assert cfg.model.name == name
    assert cfg.model.family in ("llama", "mixtral", "qwen2", "qwen3", "deepseek", "llama4", "gpt_oss", "mamba", "zebra_llama",
                                "gemma4")
    validate_config(cfg)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_file_names_its_source_first(name):
    first_line = (CONF_DIR / "model" / f"{name}.yaml").read_text().splitlines()[0]
    assert first_line.startswith("# ")
    if name in PUBLISHED_TOTALS:
        assert f"{PUBLISHED_TOTALS[name][0]:,}" in first_line, "the header comment must state the published count"


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTALS))
def test_closed_form_count_equals_published_count(name, zoo):
    published, source = PUBLISHED_TOTALS[name]
    assert model_math.count_parameters(zoo(name).model) == published, source


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_active_parameters_match_published_figure(name, zoo):
    published, tolerance, with_input_embedding, source = PUBLISHED_ACTIVE[name]
    model = zoo(name).model
    active = model_math.count_active_parameters(model)
    if not with_input_embedding:
        active -= model_math.count_embedding_parameters(model)
    assert active == pytest.approx(published, rel=tolerance), source


def test_deepseek_v3_headline_37b_active(zoo):
    """The paper's headline '37B activated' (rounded) holds with or without the input embedding."""
    model = zoo("deepseek_v3").model
    active = model_math.count_active_parameters(model)
    assert 36.5e9 < active - model_math.count_embedding_parameters(model) < active < 38e9


@pytest.mark.parametrize("name", [n for n in PRESETS if n not in PUBLISHED_ACTIVE and "tiny" not in n])
def test_dense_models_use_every_parameter(name, zoo):
    model = zoo(name).model
    assert model.moe.num_experts == 0
    assert model_math.count_active_parameters(model) == model_math.count_parameters(model)


def test_tiny_models_by_hand(zoo):
    """Independent arithmetic for the CPU presets: V=256, h=256, 4 layers, 8 heads of 32, 4 KV heads, ffn 688."""
    h, vocab, layers, hd = 256, 256, 4, 32
    attention = h * 8 * hd + 2 * h * 4 * hd + 8 * hd * h
    outside_layers = 2 * vocab * h + h  # embedding, output layer, final norm
    dense = outside_layers + layers * (attention + 3 * h * 688 + 2 * h)
    assert model_math.count_parameters(zoo("llama_tiny").model) == dense == 3_033_344
    moe_layer = attention + h * 8 + 8 * 3 * h * 256 + 2 * h  # router + 8 experts of ffn 256 + norms
    moe_active_layer = attention + h * 8 + 2 * 3 * h * 256 + 2 * h
    assert model_math.count_parameters(zoo("moe_tiny").model) == outside_layers + layers * moe_layer == 7_219_456
    assert model_math.count_active_parameters(zoo("moe_tiny").model) == outside_layers + layers * moe_active_layer


def test_embedding_count_and_tied_output(zoo):
    tied, untied = zoo("llama3.2_1b").model, zoo("llama3.1_8b").model
    assert model_math.count_embedding_parameters(tied) == 128256 * 2048
    assert model_math.count_output_layer_parameters(tied) == 0
    assert model_math.count_output_layer_parameters(untied) == 128256 * 4096


def _norm_weights(model) -> int:
    """Two RMSNorm weights per layer plus the final norm: the parameters the FLOP formula leaves out."""
    return model.num_layers * 2 * model.hidden_size + model.hidden_size


def test_flops_match_palm_formula_for_dense_gqa(zoo):
    """6N + 12*L*H*Q*T (PaLM appendix B), N = non-embedding weights excluding norms, output layer included."""
    model, seq = zoo("llama3_8b").model, 8192
    norms = _norm_weights(model)
    n = model_math.count_parameters(model) - model_math.count_embedding_parameters(model) - norms
    expected = 6 * n + 12 * model.num_layers * model.num_attention_heads * 128 * seq
    assert model_math.training_flops_per_token(model, seq) == expected
    # about 58 GFLOP per token: 6 x 7.5B non-embedding weights + 12.9 GFLOP of attention at 8K context
    assert model_math.training_flops_per_token(model, seq) == pytest.approx(6 * 7.5e9 + 12 * 32 * 4096 * 8192, rel=0.01)


def test_flops_count_the_tied_output_matmul(zoo):
    model, seq = zoo("llama3.2_1b").model, 4096
    norms = _norm_weights(model)
    attention = 12 * model.num_layers * model.num_attention_heads * 64 * seq
    # The tied table is counted once in the total, and used once as the output matmul.
    expected = 6 * (model_math.count_parameters(model) - norms) + attention
    assert model_math.training_flops_per_token(model, seq) == expected


def test_flops_use_active_experts_and_mla_head_widths(zoo):
    mixtral, seq = zoo("mixtral_8x7b").model, 4096
    norms = _norm_weights(mixtral)
    n_active = model_math.count_active_parameters(mixtral) - model_math.count_embedding_parameters(mixtral) - norms
    expected = 6 * n_active + 12 * mixtral.num_layers * mixtral.num_attention_heads * 128 * seq
    assert model_math.training_flops_per_token(mixtral, seq) == expected

    v3 = zoo("deepseek_v3").model
    assert model_math.query_key_head_dim(v3) == 192 and model_math.value_head_dim(v3) == 128
    attention = 6 * v3.num_layers * seq * v3.num_attention_heads * (192 + 128)
    matmul = model_math.count_active_matmul_parameters(v3)
    assert model_math.training_flops_per_token(v3, seq) == 6 * matmul + attention
    assert 6 * 36.5e9 < 6 * matmul < 6 * 36.7e9  # DeepSeek's 36.6B activated (output head included)


def test_calculator_takes_the_dataclass_as_well(zoo):
    as_dataclass = OmegaConf.to_object(zoo("deepseek_v3").model)
    assert model_math.count_parameters(as_dataclass) == PUBLISHED_TOTALS["deepseek_v3"][0]


def test_model_math_stays_small():
    assert len(Path(model_math.__file__).read_text().splitlines()) <= 200
