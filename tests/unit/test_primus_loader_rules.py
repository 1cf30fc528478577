"""Primus's loader rules, one case each, as task=import reads them (migrate/primus_yaml.py). The first group restates
the cases of Primus's own loader tests (tests/unit_tests/core/config at fd1eeab) in this project's words; the rest
are the rules the import got wrong before, each checked by hand against Primus's PrimusParser."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from primus_hydra.errors import PrimusError
from primus_hydra.migrate.primus_yaml import deep_merge, load_experiment, plain, read_yaml

META = "work_group: g\nuser_name: u\nexp_name: e\nworkspace: ./w\n"


def write(folder: Path, files: dict) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def read(tmp_path, text: str, environ: dict | None = None):
    return plain(read_yaml(write(tmp_path, {"c.yaml": text}) / "c.yaml", environ or {}))


# -- Primus's own loader cases -----------------------------------------------------------------------------------
def test_a_plain_file_reads_as_its_mapping(tmp_path):
    assert read(tmp_path, "a: 1\nb: test\n") == {"a": 1, "b": "test"}


def test_an_empty_file_is_refused(tmp_path):
    with pytest.raises(PrimusError, match="empty"):
        read(tmp_path, "")


def test_extends_merges_the_parent_under_the_file_and_drops_the_key(tmp_path):
    write(tmp_path, {"base.yaml": "base_val: 1\noverride_val: 1\n"})
    assert read(tmp_path, "extends:\n  - base.yaml\noverride_val: 2\nchild_val: 3\n") == {
        "base_val": 1, "override_val": 2, "child_val": 3}


def test_extends_may_name_one_file_without_a_list(tmp_path):
    write(tmp_path, {"base.yaml": "base_val: 1\noverride_val: 1\n"})
    assert read(tmp_path, "extends: base.yaml\noverride_val: 2\n") == {"base_val": 1, "override_val": 2}


def test_later_parents_win_over_earlier_ones_and_the_file_over_all(tmp_path):
    write(tmp_path, {"base1.yaml": "a: 1\nb: 1\n", "base2.yaml": "b: 2\nc: 2\n"})
    assert read(tmp_path, "extends: [base1.yaml, base2.yaml]\nc: 3\n") == {"a": 1, "b": 2, "c": 3}


def test_environment_values_are_typed_and_defaults_fill_in(tmp_path):
    text = "val_int: ${TEST_VAR}\nval_str: ${TEST_STR}\nval_default: ${MISSING:default}\nval_nested:\n  inner: ${TEST_VAR}\n"
    assert read(tmp_path, text, {"TEST_VAR": "123", "TEST_STR": "hello"}) == {
        "val_int": 123, "val_str": "hello", "val_default": "default", "val_nested": {"inner": 123}}


def test_a_required_variable_that_is_unset_is_refused(tmp_path):
    with pytest.raises(PrimusError, match="needs the environment variable NON_EXISTENT_VAR, which is not set"):
        read(tmp_path, "val: ${NON_EXISTENT_VAR}\n")


def test_a_reference_inside_text_gives_text_and_a_whole_one_a_number(tmp_path):
    assert read(tmp_path, "a: ${NUM}\nb: ${FLOAT}\nc: prefix_${NUM}\n", {"NUM": "42", "FLOAT": "3.14"}) == {
        "a": 42, "b": 3.14, "c": "prefix_42"}


def test_true_and_false_in_any_case_become_booleans_and_zero_an_int(tmp_path):
    text = ("native_false: false\nenv_false_default: ${UNSET:false}\nenv_true_default: ${UNSET:true}\n"
            "env_false_set: ${FLAG_FALSE}\nenv_upper: ${FLAG_UPPER}\nenv_zero: ${UNSET:0}\n")
    assert read(tmp_path, text, {"FLAG_FALSE": "false", "FLAG_UPPER": "False"}) == {
        "native_false": False, "env_false_default": False, "env_true_default": True, "env_false_set": False,
        "env_upper": False, "env_zero": 0}


@pytest.mark.parametrize("base, override, merged", [
    ({"a": 1, "b": 2}, {"b": 3, "c": 4}, {"a": 1, "b": 3, "c": 4}),
    ({"nested": {"x": 1, "y": 2}}, {"nested": {"y": 3, "z": 4}}, {"nested": {"x": 1, "y": 3, "z": 4}}),
    ({"a": {"x": 1}}, {"a": 2}, {"a": 2}),
    ({"a": 1}, {"a": {"x": 2}}, {"a": {"x": 2}}),
    ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
])
def test_deep_merge_merges_mappings_and_replaces_the_rest(base, override, merged):
    before = (repr(base), repr(override))
    assert deep_merge(base, override) == merged
    assert (repr(base), repr(override)) == before  # neither input changes


# -- the rules task=import reproduces now ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, primus_value", [
    ("007", 7), ("+5", "+5"), ("1_000", "1_000"), ("nan", "nan"), ("NULL", "NULL"), ('""', '""'), ("", ""),
    ("~", "~"), ("None", "None"), ("1e-4", 1e-4), (".5", 0.5), ("yes", "yes"), ("TRUE", True),
])
def test_environment_text_is_typed_by_primus_rules_not_yaml_or_omegaconf(tmp_path, text, primus_value):
    value = read(tmp_path, "default: ${UNSET_VAR:%s}\nset: ${SET_VAR}\n" % text, {"SET_VAR": text})
    assert value == {"default": primus_value, "set": primus_value}
    assert type(value["default"]) is type(primus_value)


def test_a_string_that_yaml_does_not_read_as_a_number_stays_text(tmp_path):
    assert read(tmp_path, "lr: 1e-4\nquoted: '2.5'\n") == {"lr": "1e-4", "quoted": "2.5"}


def test_extends_may_come_from_the_environment(tmp_path):
    write(tmp_path, {"base.yaml": "a: 1\n"})
    assert read(tmp_path, "extends: ${BASE:base.yaml}\nb: 2\n") == {"a": 1, "b": 2}


@pytest.mark.parametrize("text, expected", [
    ("extends:\nb: 2\n", "extends=None: Primus takes a file name or a list"),
    ("extends: {base.yaml: 1}\n", "extends={'base.yaml': 1}: Primus takes a file name or a list"),
    ("extends: [3]\n", "extends=[3]: Primus takes a file name or a list"),
    ("1: one\n", "the key 1 at the top level is not text"),
    ("day: 2024-01-01\n", "day holds a YAML date (2024-01-01), which no config holds"),
])
def test_what_primus_refuses_is_one_line_naming_the_file(tmp_path, text, expected):
    with pytest.raises(PrimusError, match=r"c\.yaml: .*" + expected.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)").replace("{", r"\{").replace("}", r"\}")):
        read(tmp_path, text)


def test_extends_in_a_circle_is_refused_naming_the_circle(tmp_path):
    write(tmp_path, {"a.yaml": "extends: b.yaml\n", "b.yaml": "extends: a.yaml\n"})
    with pytest.raises(PrimusError, match=r"`extends` runs in a circle \(a\.yaml -> b\.yaml -> a\.yaml\)"):
        read_yaml(tmp_path / "a.yaml", {})


def checkout(tmp_path: Path, module: str, model: str, experiment: str) -> Path:
    write(tmp_path, {"primus/configs/modules/megatron/m.yaml": module, "primus/configs/models/megatron/x.yaml": model,
                     "e.yaml": META + "modules:\n  pre_trainer:\n    framework: megatron\n    config: m.yaml\n"
                                      "    model: x.yaml\n" + textwrap.indent(textwrap.dedent(experiment), "    ")})
    return tmp_path / "e.yaml"


def params(tmp_path, module: str, model: str, experiment: str = "", environ: dict | None = None) -> dict:
    path = checkout(tmp_path, module, model, experiment)
    return plain(load_experiment(path, tmp_path, environ or {}).modules[0].params)


def test_the_module_preset_wins_over_the_model_preset_and_the_model_key_is_the_file(tmp_path):
    assert params(tmp_path, "make_vocab_size_divisible_by: 128\n", "make_vocab_size_divisible_by: 64\nlayers: 2\n") \
        == {"make_vocab_size_divisible_by": 128, "layers": 2, "model": "x.yaml"}


def test_an_override_to_null_passes_null(tmp_path):
    assert params(tmp_path, "a: 1\n", "mtp_num_layers: 1\n", "overrides: {mtp_num_layers: null}\n")[
        "mtp_num_layers"] is None


def test_keys_beside_config_and_model_join_the_module_below_its_preset_and_above_the_model(tmp_path):
    got = params(tmp_path, "a: 1\n", "b: model\nc: model\n",
                 "trainer_class: MyTrainer\na: module_key\nb: module_key\nc: module_key\n_hidden: 1\n"
                 "overrides: {c: override}\n")
    assert got == {"a": 1, "b": "module_key", "c": "override", "model": "x.yaml"}  # no trainer_class, no _hidden


def test_a_presets_name_and_framework_never_reach_the_trainer(tmp_path):
    assert params(tmp_path, "name: preset\nframework: other\na: 1\n", "name: model\nb: 2\n") == {
        "a": 1, "b": 2, "model": "x.yaml"}


def test_the_text_null_becomes_none_where_primus_reassigns_it(tmp_path):
    module = "top: 'null'\nsec: {a: 'null'}\n"
    model = "fresh: {a: 'null'}\nplain: ${UNSET_X:null}\n"
    assert params(tmp_path / "1", module, model) == {  # the model's new mapping is set whole: its `null` stays text
        "top": None, "sec": {"a": None}, "fresh": {"a": "null"}, "plain": None, "model": "x.yaml"}
    assert params(tmp_path / "2", module, model, "overrides: {other: 1}\n")["fresh"] == {"a": None}  # merged again


def test_an_override_of_one_key_of_a_preset_mapping_keeps_the_others(tmp_path):
    assert params(tmp_path, "lora: {enabled: true, dim: 32}\n", "a: 1\n", "overrides: {lora: {enabled: false}}\n")[
        "lora"] == {"enabled": False, "dim": 32}


def test_a_preset_params_mapping_is_the_base_of_params(tmp_path):
    assert params(tmp_path, "params: {p: 1}\na: 2\n", "b: 3\n") == {"p": 1, "a": 2, "b": 3, "model": "x.yaml"}


def test_a_key_written_twice_warns_and_the_last_counts(tmp_path):
    path = checkout(tmp_path, "a: 1\na: 2\n", "b: 1\n", "")
    experiment = load_experiment(path, tmp_path, {})
    assert plain(experiment.modules[0].params)["a"] == 2
    assert experiment.warnings == ["m.yaml: line 2: key 'a' is written twice in one mapping; the last value counts "
                                   "(as Primus reads it)"]


def test_extends_outside_the_checkout_warns(tmp_path):
    write(tmp_path, {"outside/base.yaml": "a: 1\n"})
    path = checkout(tmp_path / "root", "extends: ../../../../../outside/base.yaml\n", "b: 1\n", "")
    experiment = load_experiment(path, tmp_path / "root", {})
    assert plain(experiment.modules[0].params)["a"] == 1
    assert len(experiment.warnings) == 1 and "outside task.primus_root" in experiment.warnings[0]


@pytest.mark.parametrize("experiment, expected", [
    ("overrides: [a, b]\n", "modules.pre_trainer.overrides is a list; Primus merges a mapping"),
])
def test_a_module_of_the_wrong_shape_is_one_line(tmp_path, experiment, expected):
    with pytest.raises(PrimusError, match=expected):
        params(tmp_path, "a: 1\n", "b: 1\n", experiment)


def test_modules_as_a_list_is_one_line(tmp_path):
    write(tmp_path, {"primus/configs/x": "", "e.yaml": META + "modules: [pre_trainer]\n"})
    with pytest.raises(PrimusError, match=r"e\.yaml: modules is a list; Primus takes a mapping of trainer modules"):
        load_experiment(tmp_path / "e.yaml", tmp_path, {})
