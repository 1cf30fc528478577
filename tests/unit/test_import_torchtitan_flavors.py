"""task=import of a Primus torchtitan experiment whose flavor no zoo preset is: the canonical model is generated from
the installed torchtitan's own flavor table (migrate/torchtitan_flavors.py), dry-runs with Primus's values, and has
the parameter count torchtitan itself builds on the meta device; families the canonical model cannot hold are one
line saying what it cannot hold."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from helpers.primus_tree import META, write_primus_tree
from primus_hydra.config.model_math import count_parameters
from primus_hydra.config.schema_model import ModelConfig
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.models import generated_model_tree, with_fields
from primus_hydra.migrate.primus_yaml import load_experiment
from primus_hydra.migrate.torchtitan_flavors import flavor_args, flavor_differences, torchtitan_flavor_model
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node, import_files

pytest.importorskip("torchtitan")

# Primus's torchtitan model presets name a flavor only (as its configs/models/torchtitan/*.yaml do)
PRESETS = {
    "qwen3_0.6b": ("qwen3", "0.6B"),
    "deepseek_v3_236b": ("deepseek_v3", "236B"),
    "gpt_oss_20b": ("gpt_oss", "20b"),
    "llama4_17Bx128E": ("llama4", "17bx128e"),
}


def _experiment(preset: str) -> str:
    return META + f"""\
        modules:
          pre_trainer:
            framework: torchtitan
            config: pre_trainer.yaml
            model: {preset}.yaml
            overrides:
              training: {{local_batch_size: 2, steps: 20, seq_len: 4096}}
        """


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    files = {}
    for preset, (name, flavor) in PRESETS.items():
        files[f"primus/configs/models/torchtitan/{preset}.yaml"] = f"model: {{name: {name}, flavor: '{flavor}'}}\n"
        files[f"examples/torchtitan/{preset}-pretrain.yaml"] = _experiment(preset)
    return write_primus_tree(tmp_path_factory.mktemp("primus"), files)


@pytest.fixture(scope="module")
def imported(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("conf")
    files = [tree / "examples" / "torchtitan" / f"{preset}-pretrain.yaml" for preset in PRESETS]
    return out, {result.source.stem: result for result in import_files(files, tree / "examples", tree, out, {})}


@pytest.mark.parametrize("preset, flavor, numbers", [
    ("qwen3_0.6b", "0.6B", {"hidden_size": 1024, "num_layers": 28, "num_attention_heads": 16, "num_kv_heads": 8,
                            "head_dim": 128, "ffn_hidden_size": 3072, "tie_embeddings": True, "qk_norm": True}),
    ("deepseek_v3_236b", "236B", {"hidden_size": 5120, "num_layers": 60, "ffn_hidden_size": 12288,
                                  "vocab_size": 102400, "moe": {"num_experts": 160, "top_k": 6, "shared_experts": 2,
                                                                "ffn_hidden_size": 1536, "router_num_groups": 8,
                                                                "router_group_topk": 3}}),
])
def test_a_flavor_without_a_zoo_preset_imports_and_dry_runs_with_primus_values(tree, imported, tmp_path, preset,
                                                                               flavor, numbers):
    out, results = imported
    result = results[f"{preset}-pretrain"]
    name = preset.replace(".", "_") + "_torchtitan"
    assert (result.failure, result.model) == ("", name)
    model = yaml.safe_load((out / "model" / f"{name}.yaml").read_text())
    for key, value in numbers.items():
        assert ({k: model[key][k] for k in value} if isinstance(value, dict) else model[key]) == value
    assert yaml.safe_load(result.experiment.read_text())["backend"]["flavor"] == flavor
    experiment = load_experiment(result.source, tree, {})
    module = experiment.modules[0]
    assert dry_run_mismatches(result.name, out, module.framework, module.params, tmp_path,
                              gpus_per_node(experiment), result.passed_keys) == []


def test_a_llama4_flavor_imports_as_its_zoo_preset_and_dry_runs_with_primus_values(tree, imported, tmp_path):
    """torchtitan's llama4 17bx128e (interleaved MoE layers, scores on the experts' inputs) is the zoo's preset."""
    out, results = imported
    result = results["llama4_17Bx128E-pretrain"]
    assert (result.failure, result.model) == ("", "llama4_17bx128e")  # its flavor follows from the name (args.py)
    experiment = load_experiment(result.source, tree, {})
    module = experiment.modules[0]
    assert dry_run_mismatches(result.name, out, module.framework, module.params, tmp_path,
                              gpus_per_node(experiment), result.passed_keys) == []
    choice = torchtitan_flavor_model("llama4", "17bx16e", "llama4_17Bx16E.yaml")
    assert (choice.zoo, choice.generated) == ("llama4_17bx16e", {})


def test_a_gpt_oss_flavor_imports_as_its_zoo_preset_and_dry_runs_with_primus_values(tree, imported, tmp_path):
    """torchtitan's gpt_oss 20b (sinks, the window on every other layer, biases, the clamped SwiGLU, YaRN) is the
    zoo's preset; its debug flavor is generated over it."""
    out, results = imported
    result = results["gpt_oss_20b-pretrain"]
    assert (result.failure, result.model) == ("", "gpt_oss_20b")
    experiment = load_experiment(result.source, tree, {})
    module = experiment.modules[0]
    assert dry_run_mismatches(result.name, out, module.framework, module.params, tmp_path,
                              gpus_per_node(experiment), result.passed_keys) == []
    assert torchtitan_flavor_model("gpt_oss", "120b", "gpt_oss_120b.yaml").zoo == "gpt_oss_120b"
    debug = torchtitan_flavor_model("gpt_oss", "debugmodel", "gpt_oss_debug.yaml")
    assert debug.generated == {"hidden_size": 256, "num_layers": 4, "moe.num_experts": 8}


def test_a_flavor_torchtitan_lacks_names_the_flavors_it_has():
    with pytest.raises(PrimusError, match=r"^model.name=qwen3 model.flavor=7B: torchtitan \S+'s qwen3 has the flavors "
                                          r"debugmodel, 0.6B, 1.7B, 4B, 8B, 14B, 32B, "):
        torchtitan_flavor_model("qwen3", "7B", "qwen3_7b.yaml")


def test_the_oracle_names_a_number_the_translation_does_not_give():
    choice = torchtitan_flavor_model("qwen3", "0.6B", "qwen3_0.6b.yaml")
    wrong = with_fields(choice.zoo, {**choice.generated, "num_layers": 27})
    assert flavor_differences("qwen3", wrong, flavor_args("qwen3", "0.6B")) == [
        "n_layers: torchtitan=28 translated=27"]


def test_llama3_compares_the_ffn_width_not_the_pair_that_rounds_to_it():
    # the zoo's llama3.1_8b translates to (multiple_of, ffn_dim_multiplier) = (1024, 1.3), torchtitan's 8B to the same
    # width from its own pair: the same model, no difference; a wider FFN is one
    choice = torchtitan_flavor_model("llama3", "8B", "llama3_8b.yaml")
    model = with_fields(choice.zoo, choice.generated)
    assert flavor_differences("llama3", model, flavor_args("llama3", "8B")) == []
    wider = with_fields(choice.zoo, {**choice.generated, "ffn_hidden_size": 15360})
    assert flavor_differences("llama3", wider, flavor_args("llama3", "8B")) == [
        "ffn_width: torchtitan=14336 translated=15360"]


def _torchtitan_count(name: str, flavor: str) -> int:
    """torchtitan's model of this flavor built on the meta device: its parameters, plus its expert-bias buffers
    (the canonical count holds DeepSeek-V3's e_score_correction_bias, a checkpoint weight)."""
    torch = pytest.importorskip("torch")
    from torchtitan.protocols.train_spec import get_train_spec

    spec = get_train_spec(name)
    args = dataclasses.replace(spec.model_args[flavor])
    args.moe_impl = "standard"  # deepseek_v3's update_from_config sets it from the job config
    with torch.device("meta"):
        model = spec.model_cls(args)
    bias = sum(buffer.numel() for key, buffer in model.named_buffers() if key.endswith("expert_bias"))
    return sum(parameter.numel() for parameter in model.parameters()) + bias


@pytest.mark.parametrize("name, flavor", [("qwen3", "0.6B"), ("qwen3", "30B-A3B"), ("deepseek_v3", "236B"),
                                         ("llama4", "17bx16e"), ("llama4", "17bx128e"), ("gpt_oss", "20b"),
                                         ("gpt_oss", "120b"), ("gpt_oss", "debugmodel")])
def test_the_generated_model_has_the_parameter_count_torchtitan_builds(name, flavor):
    choice = torchtitan_flavor_model(name, flavor, f"{name}_{flavor}.yaml")
    model = OmegaConf.merge(OmegaConf.structured(ModelConfig), generated_model_tree(choice))
    assert count_parameters(model) == _torchtitan_count(name, flavor)


def test_printing_an_imported_flavor_does_not_import_torch(imported):
    out, _ = imported
    code = ("import sys\n"
            f"sys.argv = ['primus_hydra', '--config-dir', {str(out)!r}, "
            "'experiment=torchtitan/qwen3_0.6b-pretrain', '--cfg', 'job']\n"
            "from primus_hydra.cli import main\n"
            "main()\n"
            "assert 'torch' not in sys.modules, 'composing and printing imported torch'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "name: qwen3_0_6b_torchtitan" in result.stdout and "flavor: 0.6B" in result.stdout
