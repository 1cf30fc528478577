"""task=import on hostile and unlucky files: text from a Primus file never becomes live config (each injection shape
is imported, then dry-run, and nothing it asks for happens), an environment value never lands in a generated file,
and a file that is not a config is refused in one line, bounded in time and memory, naming it."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from helpers.primus_tree import META, TRAINER, write_primus_tree
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.primus_yaml import load_experiment, plain, read_yaml
from primus_hydra.migrate.source_files import MAX_SOURCE_BYTES
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import import_files


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_primus_tree(tmp_path_factory.mktemp("primus"))


def experiment(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def import_one(tree: Path, path: Path, out: Path, environ: dict | None = None):
    return import_files([path], path.parent, tree, out, environ or {})[0]


def import_overrides(tree: Path, tmp_path: Path, overrides: str):
    """The fixture's trainer module with these `overrides:` (flow YAML), imported into tmp_path/out."""
    return import_one(tree, experiment(tmp_path, "x.yaml", META + TRAINER + f"    overrides: {overrides}\n"),
                      tmp_path / "out")


def exported(tree: Path, result, out: Path, run_dir: Path) -> dict:
    assert dry_run_mismatches(result.name, out, "megatron", {}, run_dir) == []
    return yaml.safe_load((run_dir / "backend_args.yaml").read_text())


# -- code from data --------------------------------------------------------------------------------------------------
def test_a_multi_line_value_and_a_key_with_line_breaks_stay_text_in_comments(tree, tmp_path):
    marker = tmp_path / "ran"
    payload = f"x\nhydra:\n  callbacks:\n    x:\n      _target_: builtins.open\n      file: {marker}\n      mode: w\n"
    text = yaml.safe_dump({**yaml.safe_load(META), "work_group": payload, "k\nhydra:\n  job: {chdir: true}\n": 1}) \
        + TRAINER + "    overrides: {train_iters: 5}\n"
    result = import_one(tree, experiment(tmp_path, "multi.yaml", text), tmp_path / "out")
    assert result.failure == ""
    written = result.experiment.read_text()
    assert "hydra" not in yaml.safe_load(written)  # nothing but the experiment's own keys
    assert all(line.startswith("#") for line in written.split("defaults:")[0].splitlines())
    exported(tree, result, tmp_path / "out", tmp_path / "run")
    assert not marker.exists()


@pytest.mark.parametrize("value", ["${oc.env:HOME}", "a${hydra:runtime.cwd}b", "${now:%H}", "\\${x:1}", "$${y:2}",
                                   "${a:${b}}", "line1\nline2: 3", "1e-4", "1:20", "null", "<<", "yes", "~", "'q'"])
def test_text_that_looks_like_config_reaches_the_backend_as_primus_passes_it(tree, tmp_path, value):
    source = experiment(tmp_path, "v.yaml", META + TRAINER + "    overrides:\n"
                        + yaml.safe_dump({"passed_value": value}, default_flow_style=False).replace("\n", "\n      ")
                        .join(["      ", ""]).rstrip() + "\n")
    result = import_one(tree, source, tmp_path / "out")
    assert result.failure == ""
    primus = plain(load_experiment(source, tree, {}).modules[0].params["passed_value"])
    assert exported(tree, result, tmp_path / "out", tmp_path / "run")["passed_value"] == primus


@pytest.mark.parametrize("overrides, key", [
    ("{opener: {_target_: builtins.open, file: /tmp/x, mode: w}}", "backend.extra_args.opener._target_"),
    ("{hydra: {callbacks: {}}}", "backend.extra_args.hydra"),
    ("{a: {_recursive_: false}}", "backend.extra_args.a._recursive_"),
])
def test_a_key_hydra_would_act_on_is_refused_naming_it(tree, tmp_path, overrides, key):
    result = import_overrides(tree, tmp_path, overrides)
    assert key in result.failure and "a key Hydra would act on" in result.failure
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.yaml"))


@pytest.mark.parametrize("tag, kind", [
    ("!!python/object/apply:os.system ['touch {marker}']", "could not determine a constructor"),
    ("!!python/name:os.system", "could not determine a constructor"),
    ("!!binary aGVsbG8=", "holds bytes"),
    ("!!set {{a: null}}", "holds a set"),
    ("!!timestamp 2024-01-01", "holds a YAML date"),
])
def test_yaml_tags_beyond_plain_data_are_refused_and_run_nothing(tree, tmp_path, tag, kind):
    marker = tmp_path / "ran"
    result = import_one(tree, experiment(tmp_path, "tag.yaml", META + TRAINER + "    overrides:\n      x: "
                                         + tag.format(marker=marker) + "\n"), tmp_path / "out")
    assert kind in result.failure and not marker.exists()


def test_an_environment_variable_name_no_shell_can_set_is_primus_default(tree, tmp_path):
    result = import_one(tree, experiment(tmp_path, "e.yaml", META + TRAINER
                                         + "    overrides: {home: '${oc.env:HOME}'}\n"), tmp_path / "out")
    assert yaml.safe_load(result.experiment.read_text())["backend"]["extra_args"]["home"] == "HOME"


# -- secrets ---------------------------------------------------------------------------------------------------------
SECRET, TOKEN = "s3cr3t-wandb-value", "hf_zzzzzzzzzzzzzz"


def test_environment_values_stay_environment_reads_and_secrets_are_redacted(tree, tmp_path, monkeypatch):
    text = META + "env:\n  HF_TOKEN: ${HF_TOKEN}\n  WANDB_API_KEY: ${WANDB_API_KEY:none}\n" + TRAINER + \
        "    overrides:\n      hf_access_token: ${HF_TOKEN:\"\"}\n      wandb_api_key: ${WANDB_API_KEY}\n" \
        "      seq_length: ${SEQ:1024}\n"
    environ = {"HF_TOKEN": TOKEN, "WANDB_API_KEY": SECRET, "SEQ": "2048"}
    for name, value in environ.items():  # the experiment is composed (its reads resolved) before it is written
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    result = import_one(tree, experiment(tmp_path, "s.yaml", text), out, environ)
    assert result.failure == ""
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text() and TOKEN not in path.read_text(), path
    body = yaml.safe_load(result.experiment.read_text())
    assert body["platform"]["env"] == {"HF_TOKEN": "${oc.env:HF_TOKEN}", "WANDB_API_KEY": "${oc.env:WANDB_API_KEY,'none'}"}
    assert body["backend"]["extra_args"]["hf_access_token"] == "${oc.env:HF_TOKEN,'\"\"'}"
    assert body["module"]["seq_length"] == "${oc.decode:${oc.env:SEQ,'1024'}}"
    resolved = out / "primus_resolved" / "s.yaml"
    assert yaml.safe_load(resolved.read_text())["wandb_api_key"] == "<redacted>"
    assert yaml.safe_load(resolved.read_text())["seq_length"] == 2048  # from the environment, not secret
    assert stat.S_IMODE(resolved.stat().st_mode) == stat.S_IMODE(result.experiment.stat().st_mode) == 0o600
    plain_file = import_one(tree, experiment(tmp_path, "p.yaml", META + TRAINER), tmp_path / "out3")
    assert stat.S_IMODE(plain_file.experiment.stat().st_mode) == 0o644  # nothing from the environment


# -- resource bombs and odd files ------------------------------------------------------------------------------------
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.write_text(BOMB), "expands to more than 200000 values through YAML aliases"),
    (lambda p: p.write_text("a: &a [*a]\n"), "refers to itself through a YAML alias"),
    (lambda p: p.write_text("a: " + "[" * 200 + "]" * 200 + "\n"), "nested more than 64 deep"),
    (lambda p: p.write_bytes(b"a: " + b"x" * (MAX_SOURCE_BYTES + 1)), f"a Primus config is at most {MAX_SOURCE_BYTES}"),
    (lambda p: os.mkfifo(p), "a FIFO, not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "a device or socket, not a regular file"),
    (lambda p: p.write_bytes(b"a: caf\xe9\n"), "not UTF-8 text (byte 6 is 0xe9)"),
    (lambda p: p.write_bytes(b"\x00\x01\x02binary"), "not valid YAML"),
])
def test_a_file_that_is_no_config_is_refused_at_once(tmp_path, make, expected):
    path = tmp_path / "odd.yaml"
    make(path)
    with pytest.raises(PrimusError, match="odd.yaml: .*" + expected.replace("(", r"\(").replace(")", r"\)")):
        read_yaml(path, {})


def test_a_folder_of_broken_files_imports_the_others_and_names_each(tree, tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "cycle_a.yaml").write_text("extends: cycle_b.yaml\n")
    (folder / "cycle_b.yaml").write_text("extends: cycle_a.yaml\n")
    (folder / "latin1.yaml").write_bytes(b"a: caf\xe9\n")
    (folder / "overrides_list.yaml").write_text(META + TRAINER + "    overrides: [1, 2]\n")
    (folder / "modules_list.yaml").write_text(META + "modules: [pre_trainer]\n")
    (folder / "good.yaml").write_text(META + TRAINER + "    overrides: {train_iters: 7}\n")
    results = {r.source.name: r for r in import_files(sorted(folder.iterdir()), folder, tree, tmp_path / "out", {})}
    assert results["good.yaml"].failure == ""
    assert "runs in a circle (cycle_a.yaml -> cycle_b.yaml -> cycle_a.yaml)" in results["cycle_a.yaml"].failure
    assert "not UTF-8 text" in results["latin1.yaml"].failure
    assert "overrides is a list; Primus merges a mapping" in results["overrides_list.yaml"].failure
    assert "modules is a list" in results["modules_list.yaml"].failure


@pytest.mark.parametrize("overrides, expected", [
    ("{train_iters: abc}", "module.train_iters"),
    ("{tensor_model_parallel_size: 3}", "module.parallel.tp=3"),
    ("{lr: null}", "lr=None: not a number (module.lr takes one)"),
])
def test_an_experiment_that_cannot_compose_or_convert_is_not_reported_ok(tree, tmp_path, overrides, expected):
    result = import_overrides(tree, tmp_path, overrides)
    assert expected in result.failure
    assert not (tmp_path / "out" / "model").exists()  # a refused import writes nothing, its model file neither


def test_maxtexts_fill_the_rest_stays_fill_the_rest(tree, tmp_path):
    source = tree / "examples" / "maxtext" / "llama2_7B-pretrain.yaml"  # its preset: ici_fsdp_parallelism: -1
    result = import_files([source], source.parent, tree, tmp_path / "out", {})[0]
    assert dry_run_mismatches(result.name, tmp_path / "out", "maxtext", {}, tmp_path / "run") == []
    assert yaml.safe_load((tmp_path / "run" / "backend_args.yaml").read_text())["ici_fsdp_parallelism"] == -1
