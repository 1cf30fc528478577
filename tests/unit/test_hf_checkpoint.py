"""Hugging Face weights in and out of the native model (backends/common/hf_*.py), in process, on tiny models that
transformers itself builds and saves."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers.hf_models import FOLDER_DEFECTS, BuiltOnDemand, damage, needs_transformers

pytestmark = needs_transformers

FAMILIES = ["llama", "llama_tied", "llama_sharded", "qwen3_moe", "mixtral", "deepseek_v3"]


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return BuiltOnDemand(root)


def _source(folder):
    from primus_hydra.tasks.checkpoint_source import find_checkpoint_source

    return find_checkpoint_source(str(folder), "task.checkpoint")


def _native_model(source):
    from primus_hydra.backends.torch.model import build_model_on_meta
    from primus_hydra.tasks.checkpoint_source import native_state_dict

    model = build_model_on_meta(source.model).to_empty(device="cpu")
    model.load_state_dict(native_state_dict(source))
    return model.eval()


def _hf_model(folder):
    import torch
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_native_model_from_an_hf_folder_computes_transformers_logits(hf_folders, family):
    import torch

    model, reference = _native_model(_source(hf_folders[family])), _hf_model(hf_folders[family])
    tokens = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = (model(tokens) - reference(tokens).logits).abs().max().item()
    assert difference < 1e-5


@pytest.mark.parametrize("family", FAMILIES)
def test_export_of_hf_weights_gives_back_the_same_tensors(hf_folders, family, tmp_path):
    from safetensors import safe_open

    from primus_hydra.backends.common.hf_checkpoint import write_hf_folder
    from primus_hydra.tasks.checkpoint_source import native_state_dict

    source = _source(hf_folders[family])
    out = write_hf_folder(native_state_dict(source), source.model, tmp_path / "out", dtype="fp32",
                          max_shard_bytes=40_000)
    original, exported = _hf_model(hf_folders[family]).state_dict(), _hf_model(out).state_dict()
    assert sorted(exported) == sorted(original)
    assert all(exported[name].equal(original[name]) for name in original)
    files = sorted(out.glob("*.safetensors"))
    for file in files:  # each shard within the bound, unless it holds one larger tensor alone
        with safe_open(str(file), "pt") as shard:
            assert file.stat().st_size <= 40_000 + 4096 or len(list(shard.keys())) == 1
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [file.name for file in files]


def test_export_writes_bf16_and_the_config_transformers_reads(hf_folders, tmp_path):
    import torch

    from primus_hydra.backends.common.hf_checkpoint import write_hf_folder
    from primus_hydra.tasks.checkpoint_source import native_state_dict

    source = _source(hf_folders["qwen3_moe"])
    out = write_hf_folder(native_state_dict(source), source.model, tmp_path / "out", dtype="bf16")
    loaded = _hf_model(out)
    assert type(loaded).__name__ == "Qwen3MoeForCausalLM"
    assert loaded.config.num_local_experts == 8 and (out / "generation_config.json").is_file()
    original = _hf_model(hf_folders["qwen3_moe"]).state_dict()
    assert all(loaded.state_dict()[name].equal(original[name].to(torch.bfloat16).float()) for name in original)
    assert not [p.name for p in tmp_path.iterdir() if p.name != "out"]  # the temporary sibling is gone


def test_a_bf16_folder_loads_into_fp32_parameters(hf_folders, tmp_path):
    import torch

    from primus_hydra.backends.common.hf_checkpoint import load_hf_into_native, write_hf_folder
    from primus_hydra.backends.torch.model import build_model_on_meta
    from primus_hydra.tasks.checkpoint_source import native_state_dict

    source = _source(hf_folders["deepseek_v3"])
    state = native_state_dict(source)
    out = write_hf_folder(state, source.model, tmp_path / "bf16", dtype="bf16")
    model = build_model_on_meta(source.model).to_empty(device="cpu")
    load_hf_into_native(out, model)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(tensor.equal(state[name].to(torch.bfloat16).float()) for name, tensor in model.state_dict().items())


def test_export_copies_the_tokenizer_files_and_nothing_else(hf_folders, tmp_path):
    from primus_hydra.backends.common.hf_checkpoint import write_hf_folder
    from primus_hydra.tasks.checkpoint_source import native_state_dict

    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json", "notes.txt"):
        (tokenizer / name).write_text("{}")
    source = _source(hf_folders["llama"])
    out = write_hf_folder(native_state_dict(source), source.model, tmp_path / "out", tokenizer_dir=tokenizer)
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".safetensors")) == [
        "config.json", "generation_config.json", "model.safetensors.index.json", "special_tokens_map.json",
        "tokenizer.json", "tokenizer_config.json"]
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"


def test_export_refuses_an_existing_folder_and_leaves_it_as_it_was(hf_folders, tmp_path):
    from primus_hydra.backends.common.hf_checkpoint import write_hf_folder
    from primus_hydra.errors import CheckpointError

    source = _source(hf_folders["llama"])
    (tmp_path / "out").mkdir()
    with pytest.raises(CheckpointError, match="already exists"):
        write_hf_folder({}, source.model, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_pipeline_stage_loads_only_its_own_layers(hf_folders):
    import torch

    from primus_hydra.backends.common.hf_checkpoint import load_hf_into_native
    from primus_hydra.backends.torch.model import build_model_on_meta

    source = _source(hf_folders["llama_sharded"])
    whole = _native_model(source)
    stage = build_model_on_meta(source.model)
    del stage.layers["0"]
    stage.tok_embeddings = None  # the last stage of two
    stage.to_empty(device="cpu")
    load_hf_into_native(hf_folders["llama_sharded"], stage)
    assert sorted(stage.state_dict()) == sorted(k for k in whole.state_dict() if k.startswith(("layers.1.", "norm", "output")))
    assert all(torch.equal(tensor, whole.state_dict()[name]) for name, tensor in stage.state_dict().items())


def test_rope_row_maps_of_deepseek_are_inverse_and_interleave_pairs():
    from primus_hydra.backends.common.hf_names import RopeRows

    rows = RopeRows(period=24, start=16, count=8)
    assert [rows.hf_row_of_native(r) - 16 for r in range(16, 24)] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert all(rows.native_row_of_hf(rows.hf_row_of_native(r)) == r for r in range(96))
    assert rows.hf_row_of_native(5) == 5 and rows.hf_row_of_native(24 + 17) == 24 + 18


# -- check_hf_folder: one line per defect, from the headers alone --------------------------------------------------
@pytest.mark.parametrize("defect", FOLDER_DEFECTS)
def test_check_hf_folder_names_each_defect_in_one_line(hf_folders, tmp_path, defect):
    from primus_hydra.backends.common.hf_folder import check_hf_folder

    model = _source(hf_folders["llama_sharded"]).model
    assert check_hf_folder(hf_folders["llama_sharded"], model) == []
    folder = shutil.copytree(hf_folders["llama_sharded"], tmp_path / "copy")
    expected = damage(folder, defect)
    failures = check_hf_folder(folder, model)
    assert len(failures) == 1 and "\n" not in failures[0] and expected in failures[0], failures


def test_check_hf_folder_refuses_another_family(hf_folders):
    from primus_hydra.backends.common.hf_folder import check_hf_folder

    failures = check_hf_folder(hf_folders["mixtral"], _source(hf_folders["llama"]).model)
    assert len(failures) == 1 and "model_type=mixtral" in failures[0]


# -- task=export: what cannot be exported is one line from ExportTask.prepare_job, before anything is written ------
@pytest.mark.parametrize("overrides, expected", [
    (["task.checkpoint={hf}", "task.out={tmp}/x"], "task.checkpoint={hf}: already a Hugging Face folder"),
    (["task.checkpoint={tmp}", "task.out={tmp}/x"], "not a checkpoint"),
    (["task.checkpoint={tmp}/nowhere", "task.out={tmp}/x"], "task.checkpoint={tmp}/nowhere: no such folder"),
    (["task.checkpoint={hf}", "task.out={tmp}"], "task.out={tmp}: already exists"),
    (["task.checkpoint={hf}", "task.out={tmp}/x", "task.max_shard_size=lots"], "task.max_shard_size=lots: not "),
])
def test_a_bad_export_is_one_line_and_writes_nothing(hf_folders, tmp_path, overrides, expected):
    from helpers.compose import compose_primus
    from primus_hydra.errors import PrimusError
    from primus_hydra.tasks.export import ExportTask

    given = {"hf": hf_folders["llama"], "tmp": tmp_path}
    with pytest.raises(PrimusError) as raised:
        ExportTask.prepare_job(compose_primus("task=export", *[o.format(**given) for o in overrides]), None)
    lines = getattr(raised.value, "failures", None) or [str(raised.value)]
    assert len(lines) == 1 and "\n" not in lines[0] and expected.format(**given) in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_whole_weights_are_mapped_copy_on_write_and_training_never_writes_the_file(hf_folders, tmp_path):
    import hashlib

    import torch

    from primus_hydra.backends.common.hf_checkpoint import load_hf_into_native, read_hf_as_native
    from primus_hydra.backends.torch.model import build_model_on_meta

    folder = tmp_path / "llama"
    shutil.copytree(hf_folders["llama"], folder)
    digests = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in folder.glob("*.safetensors")}
    source = _source(folder)
    model = build_model_on_meta(source.model).to_empty(device="cpu")
    load_hf_into_native(folder, model)
    expected = read_hf_as_native(folder, source.model)
    assert all(torch.equal(param, expected[name]) for name, param in model.named_parameters())
    mapped = [(int(low, 16), int(high, 16)) for low, high, path in
              (line.split()[0].split("-") + [line.split()[-1]] for line in Path("/proc/self/maps").read_text().splitlines())
              if path.endswith(".safetensors") and Path(path).parent == folder]
    inside = [any(low <= param.data_ptr() < high for low, high in mapped) for param in model.parameters()]
    assert mapped and all(inside)  # every weight of this fp32 folder is a view of the file's pages
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.randint(0, 256, (2, 16))).float().pow(2).mean().backward()
    optimizer.step()  # every weight written: each a private copy of its pages
    assert not all(torch.equal(param, expected[name]) for name, param in model.named_parameters())
    assert {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in folder.glob("*.safetensors")} == digests
    reloaded = build_model_on_meta(source.model).to_empty(device="cpu")
    load_hf_into_native(folder, reloaded)
    assert all(torch.equal(param, expected[name]) for name, param in reloaded.named_parameters())
