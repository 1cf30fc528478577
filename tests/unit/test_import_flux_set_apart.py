"""task=import of Primus's Megatron diffusion experiments (Flux, model presets under models/megatron/diffusion/): no
LLM experiment, so each is one line saying what it is, and a folder's import counts it apart from the failures."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.primus_tree import META, TRAINER, write_primus_tree
from primus_hydra.migrate.primus_yaml import load_experiment, plain
from primus_hydra.tasks.import_session import import_files

FLUX_PRESET = """\
hidden_size: 64
num_attention_heads: 4
num_joint_layers: 1
num_single_layers: 1
num_layers: 2
swiglu: null
normalization: null
position_embedding_type: null
"""
FLUX_EXPERIMENT = META + """\
modules:
  pre_trainer:
    framework: megatron
    config: pre_trainer.yaml
    model: diffusion/flux_tiny.yaml
    trainer_class: FluxPretrainTrainer
    overrides: {model_type: diffusion_model, train_iters: 5}
"""
FLUX_LINE = "model diffusion/flux_tiny.yaml: a diffusion (Flux) experiment (Primus's Megatron diffusion trainer), not an LLM"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_primus_tree(tmp_path_factory.mktemp("primus"), files={
        "primus/configs/models/megatron/diffusion/flux_tiny.yaml": FLUX_PRESET,
        "examples/megatron/diffusion/flux_tiny-pretrain.yaml": FLUX_EXPERIMENT,
    })


def test_a_flux_experiment_is_set_apart_in_one_line(tree, tmp_path):
    source = tree / "examples" / "megatron" / "diffusion" / "flux_tiny-pretrain.yaml"
    [result] = import_files([source], tree / "examples", tree, tmp_path / "out", {})
    assert result.set_apart
    assert result.failure == FLUX_LINE
    assert not (tmp_path / "out" / "experiment").exists()


def test_primus_loader_still_reads_a_flux_experiment(tree):
    """Only the import sets it apart: read as Primus reads it, it is the experiment Primus runs."""
    module = load_experiment(tree / "examples" / "megatron" / "diffusion" / "flux_tiny-pretrain.yaml", tree, {}).modules[0]
    assert plain(module.params["num_joint_layers"]) == 1
    assert plain(module.params["model_type"]) == "diffusion_model"


def test_a_folder_with_a_flux_experiment_imports_the_rest_and_counts_it_apart(tree, tmp_path):
    folder = tmp_path / "examples"
    (folder / "diffusion").mkdir(parents=True)
    (folder / "diffusion" / "flux_tiny-pretrain.yaml").write_text(FLUX_EXPERIMENT)
    (folder / "llama-pretrain.yaml").write_text(META + TRAINER + "    overrides: {train_iters: 5}\n")
    result = primus("task=import", f"task.source={folder}", f"task.primus_root={tree}", f"task.out={tmp_path / 'out'}",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if line.strip()}
    assert rows["diffusion/flux_tiny-pretrain.yaml"].endswith(f"set apart: {FLUX_LINE}")
    assert "imported 1 experiment(s) into" in result.stdout
    assert "; 1 set apart (no LLM experiment: what each is, above)" in result.stdout
