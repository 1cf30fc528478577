"""task=import reads an experiment as Primus does, on 300 generated trees (helpers/primus_random_trees.py): the
trainer's `params` (values and types) equal what the tests' statement of Primus's rules gives
(helpers/primus_reference.py), which scripts/check_primus_loader.py holds against Primus's own PrimusParser by hand
(1000 of 1000 trees agreed with Primus fd1eeab; the loader this replaced agreed on 5 of 300)."""
from __future__ import annotations

import pytest

from helpers.plain_data import leaves
from helpers.primus_random_trees import TreeMaker
from helpers.primus_reference import primus_params
from primus_hydra.migrate.emit import same_value
from primus_hydra.migrate.primus_yaml import load_experiment, plain

TREES = 300


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """(root, [(experiment file, environment, Primus's params)]) for every generated tree."""
    root = tmp_path_factory.mktemp("primus")
    made = []
    for index in range(TREES):
        maker = TreeMaker(index)
        path = maker.write(root, index)
        made.append((path, maker.environ, primus_params(path, root, maker.environ)))
    return root, made


def test_every_generated_tree_reads_as_primus_reads_it(trees):
    root, made = trees
    cache: dict = {}
    differing = [path.name for path, environ, primus in made
                 if not same_value(plain(load_experiment(path, root, environ, cache).modules[0].params), primus)]
    assert differing == []


def test_the_trees_reach_the_values_primus_types_its_own_way(trees):
    """Leaves that are the text `null` kept (not merged), text OmegaConf would type (`+5`, `1_000`, `nan`, `""`,
    `~`), and values from environment defaults inside longer text: the rules the differential test is about."""
    found = [leaf for _, _, primus in trees[1] for leaf in leaves(primus)]
    assert {"null", "+5", "1_000", "nan", '""', "~"} <= {leaf for leaf in found if isinstance(leaf, str)}
    assert {"p-abc-q", "p-7-q"} & set(found)


def test_a_tree_copy_is_a_deep_copy_whose_unchanging_leaves_are_shared():
    import copy

    from primus_hydra.migrate.primus_yaml import EnvString, EnvValue, tree_copy

    text = EnvString("llama3_8B.yaml")
    text.template, text.from_environment = "${PRIMUS_MODEL:llama3_8B}.yaml", True
    env_number, env_list = EnvValue(8, "TP", "8", 8, False), EnvValue([1, 2], "L", "[1,2]", [1, 2], True)
    tree = {"a": 1, "b": [1.5, {"c": None, "d": text}], "e": {"f": env_number, "g": env_list}, "h": {1, 2}}
    copied = tree_copy(tree)
    assert copied == copy.deepcopy(tree) and same_value(plain(copied), plain(tree))
    assert copied["b"][1]["d"] is text and copied["e"]["f"] is env_number  # never changed once made: shared
    assert copied["e"]["g"] is not env_list and copied["e"]["g"].value is not env_list.value  # holds a list: copied
    assert copied["h"] is not tree["h"]  # a leaf of another kind: deep-copied
    copied["b"][1]["c"], copied["e"]["x"] = "changed", 1
    copied["b"].append(3)
    assert tree == {"a": 1, "b": [1.5, {"c": None, "d": text}], "e": {"f": env_number, "g": env_list}, "h": {1, 2}}
