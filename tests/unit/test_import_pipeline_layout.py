"""task=import of Primus experiments with a pipeline_model_parallel_layout no simpler key holds (unequal virtual
stages, as Primus's deepseek_v3, minimax_m2.5 and qwen3_235B experiments on MI355X): the layout becomes
backend.pipeline_layout and the dry run exports Primus's own string; what Megatron itself refuses is one line."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.primus_tree import META, TRAINER, import_megatron_examples, write_primus_tree
from primus_hydra.migrate.primus_yaml import load_experiment, plain
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node


def experiment(overrides: str) -> str:
    return META + TRAINER + f"    overrides: {{train_iters: 5, {overrides}}}\n"


MINIMAX_SHAPE = "Et*2|t*3|t*3|t*2,L"  # 10 layers in 2 virtual stages per rank of 2/3/3/2 over pp=2
HELD = {
    "virtual_stages_named_too": f"num_layers: 10, pipeline_model_parallel_size: 2, "
                                f"virtual_pipeline_model_parallel_size: 2, pipeline_model_parallel_layout: '{MINIMAX_SHAPE}'",
    "unequal_first_rank": "num_layers: 7, pipeline_model_parallel_size: 2, "
                          "pipeline_model_parallel_layout: 'Ett|(tt|)*2t,L'",
}
REFUSED = {
    "virtual_stages_conflict": (
        f"num_layers: 10, pipeline_model_parallel_size: 2, virtual_pipeline_model_parallel_size: 4, "
        f"pipeline_model_parallel_layout: '{MINIMAX_SHAPE}'",
        f"pipeline_model_parallel_layout={MINIMAX_SHAPE} makes 2 virtual stage(s) per rank over "
        f"pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=4: Megatron itself refuses the conflict"),
    # deepseek_v3's preset: mtp_num_layers=1, and a layout without its MTP layer
    "mtp_layer_missing": (
        f"num_layers: 10, pipeline_model_parallel_size: 2, mtp_num_layers: 1, "
        f"pipeline_model_parallel_layout: '{MINIMAX_SHAPE}'",
        f"pipeline_model_parallel_layout={MINIMAX_SHAPE}: Megatron itself refuses this experiment's layout (it holds "
        f"0 MTP layers, the model has mtp_num_layers=1)"),
    # deepseek_v4_flash's shape: 43 layers on pp=8, nothing that splits them
    "pp_does_not_divide": (
        "num_layers: 43, pipeline_model_parallel_size: 8",
        "pipeline_model_parallel_size=8 does not divide num_layers=43 and nothing splits them unevenly "
        "(decoder_first_pipeline_num_layers/decoder_last_pipeline_num_layers, pipeline_model_parallel_layout): "
        "Megatron itself refuses this experiment (Megatron-LM's validate_args and megatron-core's "
        "get_num_layers_to_build need num_layers divisible by pipeline_model_parallel_size; its TransformerConfig "
        "alone accepts it); set e.g. decoder_first_pipeline_num_layers: 4 and decoder_last_pipeline_num_layers: 3 "
        "in its overrides"),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    overrides = {**HELD, **{name: text for name, (text, _) in REFUSED.items()}}
    files = {f"examples/megatron/{name}.yaml": experiment(text) for name, text in overrides.items()}
    return write_primus_tree(tmp_path_factory.mktemp("primus"), files=files)


@pytest.fixture(scope="module")
def imported(tree, tmp_path_factory):
    return import_megatron_examples(tree, {**HELD, **REFUSED}, tmp_path_factory.mktemp("conf"))


def primus_params(tree: Path, name: str) -> tuple:
    loaded = load_experiment(tree / "examples" / "megatron" / f"{name}.yaml", tree, {})
    return plain(loaded.modules[0].params), gpus_per_node(loaded)


def written_backend(out: Path, name: str) -> dict:
    import yaml

    return yaml.safe_load((out / "experiment" / "megatron" / f"{name}.yaml").read_text())["backend"]


@pytest.mark.parametrize("name", list(HELD))
def test_the_layout_is_imported_as_primus_wrote_it(tree, imported, name):
    out, results = imported
    assert results[name].failure == ""
    backend = written_backend(out, name)
    params, _ = primus_params(tree, name)
    assert backend["pipeline_layout"] == params["pipeline_model_parallel_layout"]
    assert backend.get("virtual_stages_per_pipeline_rank") is None  # the layout makes them


@pytest.mark.parametrize("name", list(HELD))
def test_the_dry_run_exports_primus_layout_exactly(tree, imported, tmp_path, name):
    out, _ = imported
    params, gpus = primus_params(tree, name)
    assert dry_run_mismatches(f"megatron/{name}", out, "megatron", params, tmp_path, gpus,
                              passed=("pipeline_model_parallel_layout",)) == []


def test_the_check_sees_a_layout_that_differs(tree, imported, tmp_path):
    out, _ = imported
    params, gpus = primus_params(tree, "unequal_first_rank")
    changed = {**params, "pipeline_model_parallel_layout": "Ett|tt|t|tt,L"}
    assert dry_run_mismatches("megatron/unequal_first_rank", out, "megatron", changed, tmp_path, gpus) == [
        "layers per pipeline stage: primus=[2, 2, 1, 2] exported=[2, 2, 2, 1]"]


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_megatron_refuses_is_one_line(imported, name):
    _, results = imported
    failure = results[name].failure
    assert failure.endswith(REFUSED[name][1]) and "\n" not in failure
    assert results[name].experiment is None
