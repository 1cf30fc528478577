"""task=import on a Primus-shaped checkout written for these tests (helpers/primus_tree.py): Primus's semantics
(env defaults typed, extends chains, module preset over model preset, overrides adding keys), each framework's
shape, the warnings, the bad inputs; and the check that matters: a dry run of every imported experiment exports
exactly the values Primus resolves (migrate/check.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers.cli import primus
from helpers.primus_tree import EXPERIMENTS, META, write_primus_tree
from primus_hydra.errors import PrimusError
from primus_hydra.migrate.primus_yaml import EnvValue, load_experiment, plain, read_yaml
from primus_hydra.tasks.import_primus import dry_run_mismatches
from primus_hydra.tasks.import_session import gpus_per_node, import_files


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_primus_tree(tmp_path_factory.mktemp("primus"))


@pytest.fixture(scope="module")
def imported(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("conf")
    files = sorted((tree / "examples").rglob("*.yaml"))
    return out, {result.name: result for result in import_files(files, tree / "examples", tree, out, {})}


def module_of(tree: Path, name: str, environ: dict | None = None):
    return load_experiment(tree / "examples" / f"{name}.yaml", tree, environ or {}).modules[0]


# -- Primus's semantics ------------------------------------------------------------------------------------------
def test_env_defaults_are_typed_and_remember_their_variable(tree):
    params = module_of(tree, "megatron/llama3_8B-pretrain").params
    assert params["seq_length"] == EnvValue(4096, "PRIMUS_SEQ_LENGTH", "4096", 4096, False)
    assert plain(params["use_distributed_optimizer"]) is False
    # `null` from the environment is text to Primus, which the merge of the overrides then makes None
    assert params["lr_decay_iters"] == EnvValue(None, "PRIMUS_DECAY", "null", None, False)
    assert params["train_iters"] == 50  # a literal stays as written
    set_env = module_of(tree, "megatron/llama3_8B-pretrain", {"PRIMUS_TP": "4"}).params
    # the environment wins, typed, and stays an environment read
    assert set_env["tensor_model_parallel_size"] == EnvValue(4, "PRIMUS_TP", "2", 2, True)


def test_a_required_variable_that_is_unset_is_one_line(tree, tmp_path):
    path = tmp_path / "needs.yaml"
    path.write_text("a: ${NOT_SET_ANYWHERE}\n")
    with pytest.raises(PrimusError, match=r"needs the environment variable NOT_SET_ANYWHERE, which is not set"):
        read_yaml(path, {})


def test_extends_merge_in_order_with_the_file_last(tmp_path):
    (tmp_path / "a.yaml").write_text("x: 1\nnested: {p: 1, q: 1}\nlist: [1, 2]\n")
    (tmp_path / "b.yaml").write_text("x: 2\nnested: {q: 2}\n")
    (tmp_path / "c.yaml").write_text("extends: [a.yaml, b.yaml]\nnested: {r: 3}\nlist: [9]\n")
    assert read_yaml(tmp_path / "c.yaml", {}) == {"x": 2, "nested": {"p": 1, "q": 2, "r": 3}, "list": [9]}


def test_the_module_preset_shadows_the_model_preset_and_overrides_add_keys(tree, imported):
    module = module_of(tree, "megatron/llama3_8B-pretrain")
    assert module.params["num_layers"] == 2  # trainer_base's, not the model preset's 32
    assert module.params["overlap_grad_reduce"] is True  # in no preset: added by the overrides
    result = imported[1]["megatron/llama3_8B-pretrain"]
    assert any("num_layers=32 is shadowed by the module's 2" in line for line in result.warnings)
    assert any("`lr` at the top level is ignored by Primus" in line for line in result.warnings)


# -- what is written -----------------------------------------------------------------------------------------------
def test_the_experiment_keeps_env_reads_states_8_gpus_and_passes_the_rest_through(imported):
    out, results = imported
    text = results["megatron/llama3_8B-pretrain"].experiment.read_text()
    body = yaml.safe_load(text)
    assert text.startswith("# @package _global_\n")
    assert body["launch"] == {"nproc_per_node": 8}
    assert body["module"]["parallel"]["tp"] == "${oc.decode:${oc.env:PRIMUS_TP,'2'}}"
    assert body["module"]["seq_length"] == "${oc.decode:${oc.env:PRIMUS_SEQ_LENGTH,'4096'}}"
    assert body["backend"]["extra_args"] == {"overlap_grad_reduce": True, "attention_softmax_in_fp32": True}
    assert "#   use_turbo_attention: true" in text  # a Primus extension: listed, not passed
    assert "Primus picks the model preset from ${PRIMUS_MODEL:llama3_8B}.yaml" in text
    assert (out / "primus_resolved" / "megatron" / "llama3_8B-pretrain.yaml").is_file()


def test_a_model_the_zoo_lacks_is_generated_from_the_closest_preset(imported):
    out, results = imported
    result = results["megatron/odd_llama-pretrain"]
    assert result.model == "odd_llama_primus"
    model = yaml.safe_load((out / "model" / "odd_llama_primus.yaml").read_text())
    assert {k: model[k] for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads")} == {
        "num_layers": 2, "hidden_size": 320, "ffn_hidden_size": 864, "num_attention_heads": 5}
    experiment = yaml.safe_load(result.experiment.read_text())
    assert experiment["model"]["norm_eps"] == 1e-6  # set by the experiment's overrides, not the preset
    assert experiment["platform"]["env"] == {"NCCL_DEBUG": "WARN", "GPUS_PER_NODE": "4"}  # Primus's env: block
    assert experiment["launch"] == {"nproc_per_node": 4}  # the file says otherwise than Primus's default of 8


@pytest.mark.parametrize("name, backend, model", [
    ("megatron/llama3_8B-pretrain", "megatron", "llama3_8b_primus"),
    ("megatron/odd_llama-pretrain", "megatron", "odd_llama_primus"),
    ("torchtitan/llama3.1_8B-pretrain", "torchtitan", "llama3.1_8b"),
    ("maxtext/llama2_7B-pretrain", "maxtext", "llama2_7b"),
    ("megatron_bridge/llama3_8b-pretrain", "megatron_bridge", "llama3_8b"),
    ("megatron_bridge/odd_llama-pretrain", "megatron_bridge", "odd_llama_primus"),  # numbers: the Megatron preset's
    ("megatron_bridge/mamba_130M-pretrain", "megatron_bridge", "mamba2_130m"),  # the flavor's model
])
def test_every_imported_experiment_dry_runs_with_primus_values(tree, imported, tmp_path, name, backend, model):
    out, results = imported
    result = results[name]
    assert (result.backend, result.model, result.failure) == (backend, model, "")
    experiment = load_experiment(tree / "examples" / f"{name}.yaml", tree, {})
    module = experiment.modules[0]
    assert dry_run_mismatches(name, out, module.framework, module.params, tmp_path, gpus_per_node(experiment)) == []


def test_the_check_sees_a_value_that_differs(tree, imported, tmp_path):
    out, _ = imported
    module = module_of(tree, "megatron/llama3_8B-pretrain")
    wrong = {**plain(module.params), "global_batch_size": 64}
    assert dry_run_mismatches("megatron/llama3_8B-pretrain", out, "megatron", wrong, tmp_path) == [
        "global_batch_size: primus=64 exported=128"]


# -- bad input ------------------------------------------------------------------------------------------------------
BAD = {
    "not_an_experiment.yaml": ("a: 1\n", "not a Primus experiment (it has no `modules:`)"),
    "template.yaml": (META + "modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
                      "    model: <YOUR_MODEL_YAML>\n",
                      "a template, not an experiment (it still has the placeholder <YOUR_MODEL_YAML>)"),
    "missing_preset.yaml": (META + "modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
                            "    model: nowhere.yaml\n", "the model preset nowhere.yaml is not in"),
    "unknown_framework.yaml": (META + "modules:\n  pre_trainer:\n    framework: jaxformer\n"
                               "    config: pre_trainer.yaml\n    model: x.yaml\n",
                               "framework=jaxformer: not importable (this project's backends: megatron, torchtitan"),
    "broken.yaml": ("modules: [\n", "not valid YAML (line 2)"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_each_bad_file_is_one_line_naming_it(tree, tmp_path, name):
    text, expected = BAD[name]
    path = tmp_path / name
    path.write_text(text)
    result = primus("task=import", f"task.source={path}", f"task.primus_root={tree}", f"task.out={tmp_path / 'out'}",
                    cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: 1 of 1 file(s) not imported: {path}: ")
    assert expected in lines[0]
    assert not (tmp_path / "out" / "experiment").exists()


def test_a_folder_imports_the_rest_and_exits_2_with_a_table(tree, tmp_path):
    folder = tmp_path / "examples"
    for name in EXPERIMENTS:
        if name.startswith("examples/megatron/"):
            (folder / Path(name).name).parent.mkdir(parents=True, exist_ok=True)
            (folder / Path(name).name).write_text((tree / name).read_text())
    (folder / "notes.yaml").write_text("a: 1\n")  # no experiment: set apart, not a failure
    (folder / "hardware.yaml").write_text("hardware_config: {node_bw: 448.0}\n")
    (folder / "video.yaml").write_text(META + "modules:\n  pre_trainer:\n    framework: maxdiffusion\n")
    (folder / "other.yaml").write_text(META + "modules:\n  pre_trainer:\n    framework: nonesuch\n")
    result = primus("task=import", f"task.source={folder}", f"task.primus_root={tree}", f"task.out={tmp_path / 'out'}",
                    cwd=tmp_path)
    assert result.returncode == 2
    table = result.stdout.splitlines()
    assert table[0].split() == ["file", "backend", "model", "passed", "through", "status"]
    rows = {line.split()[0]: line for line in table[2:]}
    assert rows["llama3_8B-pretrain.yaml"].endswith("ok, 2 warning(s)")
    assert "set apart: not a Primus experiment" in rows["notes.yaml"]
    assert "set apart: a hardware description for Primus's performance projection, not an experiment" in \
        rows["hardware.yaml"]
    assert "set apart: framework=maxdiffusion: a MaxDiffusion experiment (diffusion models: Flux, Wan), not an LLM" in \
        rows["video.yaml"]
    assert "skipped: framework=nonesuch: not importable" in rows["other.yaml"]
    assert result.stderr.strip() == ("error: 1 of 6 file(s) not imported; 3 set apart (no LLM experiment: what each "
                                     "is, above)")
    assert (tmp_path / "out" / "experiment" / "odd_llama-pretrain.yaml").is_file()
    (folder / "other.yaml").unlink()  # what is left imports: the files set apart do not make it fail
    result = primus("task=import", f"task.source={folder}", f"task.primus_root={tree}", f"task.out={tmp_path / 'out2'}",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "imported 2 experiment(s) into" in result.stdout and "; 3 set apart (no LLM experiment" in result.stdout


def test_a_file_of_the_users_is_never_overwritten(tree, tmp_path):
    out = tmp_path / "out"
    mine = out / "experiment" / "llama3_8B-pretrain.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text("# my own experiment\n")
    source = tree / "examples" / "megatron" / "llama3_8B-pretrain.yaml"
    result = primus("task=import", f"task.source={source}", f"task.out={out}", cwd=tmp_path)
    assert result.returncode == 2 and "is not what task=import wrote (edited since, or yours); kept" in result.stderr
    assert mine.read_text() == "# my own experiment\n"
    again = primus("task=import", f"task.source={tree / 'examples' / 'megatron' / 'odd_llama-pretrain.yaml'}",
                   f"task.out={out}", cwd=tmp_path)  # the checkout is found from the source: no primus_root
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"wrote {out}/experiment/odd_llama-pretrain.yaml (backend=megatron, model=odd_llama_primus, 0 key(s) passed "
        f"through)", f"run it: python -m primus_hydra --config-dir {out} experiment=odd_llama-pretrain"]
    rerun = primus("task=import", f"task.source={tree / 'examples' / 'megatron' / 'odd_llama-pretrain.yaml'}",
                   f"task.out={out}", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr  # its own files are rewritten


def test_the_imported_experiment_runs_from_the_command_line(tree, imported, tmp_path):
    out, _ = imported
    result = primus("--config-dir", str(out), "experiment=torchtitan/llama3.1_8B-pretrain", "task.dry_run=true",
                    f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    job = yaml.safe_load((tmp_path / "run" / "backend_args.yaml").read_text())
    assert (job["training"]["local_batch_size"], job["training"]["seq_len"], job["lr_scheduler"]["decay_ratio"]) == (
        4, 8192, 0.8)
    assert job["parallelism"]["tensor_parallel_degree"] == 2 and job["model"]["flavor"] == "8B"


@pytest.mark.parametrize("args, expected", [
    ([], "error: task.source is not set: give a Primus experiment file or a folder of them"),
    (["task.source=/nonexistent/x.yaml"], "error: task.source=/nonexistent/x.yaml: no such file or folder"),
    (["task.source={tmp}/lone.yaml"], "error: task.primus_root is not set and no Primus checkout contains"),
    (["task.source={tmp}/lone.yaml", "task.primus_root={tmp}"], "error: task.primus_root={tmp}: not a Primus checkout"),
])
def test_what_task_import_needs_is_one_line(tmp_path, args, expected):
    (tmp_path / "lone.yaml").write_text("a: 1\n")
    result = primus("task=import", *(arg.format(tmp=tmp_path) for arg in args), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(expected.format(tmp=tmp_path))
