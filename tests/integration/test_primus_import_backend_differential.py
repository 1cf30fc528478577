"""What an imported experiment passes to the backend is what Primus passes: generated experiments over the fixture
checkout (random overrides and module keys of tricky values: environment defaults Primus and OmegaConf type
differently, the text `null`, nulls over a model preset's value, a mapping merged into a preset's) are imported,
dry-run, and every passed-through key and every checked key of the exported Megatron arguments is compared with the
trainer params of the tests' statement of Primus's rules (helpers/primus_reference.py), value and type."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers.primus_random_trees import VARIABLES, TreeMaker
from helpers.primus_reference import primus_params
from helpers.primus_tree import META, write_primus_tree
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import import_files

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXPERIMENTS = 30
PASSED_KEYS = ("one_logger_project", "data_cache_path", "x_note", "x_list", "x_flag", "lora")
GEN_TRAINER = """\
extends: [pre_trainer.yaml]
one_logger_project: null
x_note: 'null'
lora: {enabled: true, dim: 32}
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = write_primus_tree(tmp_path_factory.mktemp("primus"))
    (root / "primus/configs/modules/megatron/gen_trainer.yaml").write_text(GEN_TRAINER)
    return root


# variables set to text that Primus and OmegaConf's oc.decode type alike: a variable set to `+5`, `1_000`, `nan` or
# `NULL` when the imported experiment runs is typed by OmegaConf (docs/migrating_from_primus.md)
SET_TEXTS = ["7", "-3", "2.5", ".5", "1e-4", "true", "False", "abc", "/data/c4", "1.0.0", "x:y"]


def generated(tree: Path, index: int) -> tuple[Path, dict]:
    maker = TreeMaker(1000 + index)
    rng = maker.rng
    maker.environ = {var: rng.choice(SET_TEXTS) for var in maker.environ}
    overrides = {key: maker.value() for key in PASSED_KEYS if rng.random() < 0.6}
    if rng.random() < 0.5:
        overrides["lora"] = {"enabled": maker.scalar()}  # merged into the preset's mapping
    if rng.random() < 0.3:
        overrides["attention_softmax_in_fp32"] = rng.choice([None, False])  # over the model preset's true
    trainer = {"framework": "megatron", "config": "gen_trainer.yaml", "model": "llama3_8B.yaml",
               "overrides": {"train_iters": 5, **overrides}}
    if rng.random() < 0.3:
        trainer["data_cache_path"] = maker.scalar()  # a key beside config/model
    path = tree / "examples" / "generated" / f"g{index}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(META + yaml.safe_dump({"modules": {"pre_trainer": trainer}}, sort_keys=False))
    return path, maker.environ


@pytest.mark.parametrize("index", range(EXPERIMENTS))
def test_what_the_backend_receives_is_what_primus_passes(tree, tmp_path, monkeypatch, index):
    path, environ = generated(tree, index)
    for var in VARIABLES:  # the imported experiment reads the environment when it is composed
        monkeypatch.delenv(var, raising=False)
    for var, value in environ.items():
        monkeypatch.setenv(var, value)
    result = import_files([path], path.parent, tree, tmp_path / "out", environ)[0]
    assert result.failure == ""
    primus = primus_params(path, tree, environ)
    overridden = [key for key in yaml.safe_load(path.read_text())["modules"]["pre_trainer"]["overrides"]
                  if key in PASSED_KEYS + ("attention_softmax_in_fp32",)]
    assert set(overridden) <= set(result.passed_keys)
    assert dry_run_mismatches(result.name, tmp_path / "out", "megatron", primus, tmp_path / "run", 8,
                              result.passed_keys) == []
