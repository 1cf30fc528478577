"""task=import of Primus experiments whose pipeline stages hold unequal layers: fixed first/last stages, a
pipeline_model_parallel_layout and Megatron's own accounting become backend.decoder_first/last_pipeline_num_layers
(or virtual stages, or backend.pipeline_layout), and the dry run exports Primus's split exactly; what Megatron
refuses is one line."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.primus_tree import META, TRAINER, import_megatron_examples, write_primus_tree
from primus_hydra.migrate.primus_yaml import load_experiment, plain
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node


def experiment(overrides: str) -> str:
    return META + TRAINER + f"    overrides: {{train_iters: 5, {overrides}}}\n"


# name -> (the overrides, the backend.* keys the import must write)
HELD = {
    "first_and_last": ("num_layers: 6, pipeline_model_parallel_size: 4, decoder_first_pipeline_num_layers: 1, "
                       "decoder_last_pipeline_num_layers: 1",
                       {"decoder_first_pipeline_num_layers": 1, "decoder_last_pipeline_num_layers": 1}),
    # glm5's shape: only the last stage fixed, and one virtual stage per rank (no interleaving)
    "last_only": ("num_layers: 7, pipeline_model_parallel_size: 4, decoder_last_pipeline_num_layers: 1, "
                  "virtual_pipeline_model_parallel_size: 1",
                  {"decoder_last_pipeline_num_layers": 1, "virtual_stages_per_pipeline_rank": None}),
    "layout": ("num_layers: 6, pipeline_model_parallel_size: 4, pipeline_model_parallel_layout: 'Et|t*2|t*2|t,L'",
               {"decoder_first_pipeline_num_layers": 1, "decoder_last_pipeline_num_layers": 1}),
    "interleaved_layout": ("num_layers: 8, pipeline_model_parallel_size: 4, "
                           "pipeline_model_parallel_layout: 'E(t|)*7t,L'",
                           {"virtual_stages_per_pipeline_rank": 2, "decoder_first_pipeline_num_layers": None}),
    "accounted": ("num_layers: 6, pipeline_model_parallel_size: 4, account_for_embedding_in_pipeline_split: true, "
                  "account_for_loss_in_pipeline_split: true",
                  {"decoder_first_pipeline_num_layers": 1, "decoder_last_pipeline_num_layers": 1}),
    # unequal virtual stages: no simpler key holds them, so Primus's layout is kept as it is
    "interleaved_unequal": ("num_layers: 14, pipeline_model_parallel_size: 4, "
                            "pipeline_model_parallel_layout: 'Et|t*2|t*2|t*2|t*2|t*2|t*2|t,L'",
                            {"pipeline_layout": "Et|t*2|t*2|t*2|t*2|t*2|t*2|t,L",
                             "virtual_stages_per_pipeline_rank": None, "decoder_first_pipeline_num_layers": None}),
}
REFUSED = {
    "nothing_splits": ("num_layers: 6, pipeline_model_parallel_size: 4",
                       "pipeline_model_parallel_size=4 does not divide num_layers=6 and nothing splits them unevenly "
                       "(decoder_first_pipeline_num_layers/decoder_last_pipeline_num_layers, "
                       "pipeline_model_parallel_layout): Megatron itself refuses this experiment (Megatron-LM's "
                       "validate_args and megatron-core's get_num_layers_to_build need num_layers divisible by "
                       "pipeline_model_parallel_size; its TransformerConfig alone accepts it); set e.g. "
                       "decoder_first_pipeline_num_layers: 1 and decoder_last_pipeline_num_layers: 1 in its overrides"),
    "outer_stages_do_not_close": ("num_layers: 7, pipeline_model_parallel_size: 4, "
                                  "decoder_first_pipeline_num_layers: 2",
                                  "backend.decoder_first_pipeline_num_layers=2, decoder_last_pipeline_num_layers=None:"
                                  " with module.parallel.pp=4 the other stages must split the rest of "
                                  "model.num_layers=7 evenly"),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    files = {f"examples/megatron/{name}.yaml": experiment(overrides)
             for name, (overrides, _) in {**HELD, **REFUSED}.items()}
    return write_primus_tree(tmp_path_factory.mktemp("primus"), files=files)


@pytest.fixture(scope="module")
def imported(tree, tmp_path_factory):
    return import_megatron_examples(tree, {**HELD, **REFUSED}, tmp_path_factory.mktemp("conf"))


def written_backend(out: Path, name: str) -> dict:
    import yaml

    return yaml.safe_load((out / "experiment" / "megatron" / f"{name}.yaml").read_text())["backend"]


def primus_params(tree: Path, name: str) -> tuple:
    loaded = load_experiment(tree / "examples" / "megatron" / f"{name}.yaml", tree, {})
    return plain(loaded.modules[0].params), gpus_per_node(loaded)


@pytest.mark.parametrize("name", list(HELD))
def test_the_split_is_imported_onto_the_backend_keys(imported, name):
    out, results = imported
    assert results[name].failure == ""
    backend = written_backend(out, name)
    assert {key: backend.get(key) for key in HELD[name][1]} == HELD[name][1]


@pytest.mark.parametrize("name", list(HELD))
def test_the_dry_run_exports_primus_split_exactly(tree, imported, tmp_path, name):
    out, _ = imported
    params, gpus = primus_params(tree, name)
    assert dry_run_mismatches(f"megatron/{name}", out, "megatron", params, tmp_path, gpus) == []


@pytest.mark.parametrize("name, changed, expected", [
    ("first_and_last", {"decoder_first_pipeline_num_layers": 2, "decoder_last_pipeline_num_layers": 2},
     ["decoder_first_pipeline_num_layers: primus=2 exported=1", "decoder_last_pipeline_num_layers: primus=2 exported=1"]),
    ("layout", {"pipeline_model_parallel_layout": "Et*2|t|t*2|t,L"},
     ["layers per pipeline stage: primus=[2, 1, 2, 1] exported=[1, 2, 2, 1]"]),
])
def test_the_check_sees_a_split_that_differs(tree, imported, tmp_path, name, changed, expected):
    out, _ = imported
    params, gpus = primus_params(tree, name)
    assert dry_run_mismatches(f"megatron/{name}", out, "megatron", {**params, **changed}, tmp_path, gpus) == expected


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_split_that_cannot_be_held_is_refused_in_one_line(imported, name):
    _, results = imported
    failure = results[name].failure
    assert REFUSED[name][1] in failure and "\n" not in failure
    assert results[name].experiment is None


def test_the_command_line_says_why_in_one_line(tree, tmp_path):
    path = tree / "examples" / "megatron" / "nothing_splits.yaml"
    result = primus("task=import", f"task.source={path}", f"task.primus_root={tree}", f"task.out={tmp_path / 'out'}",
                    cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: 1 of 1 file(s) not imported: {path}: {REFUSED['nothing_splits'][1]}"]
