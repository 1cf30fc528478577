"""`model.from_hf=<DIR>` on the command line: the folder's config.json is the model `--cfg job` prints and a dry
run translates, without torch; each bad input is one `error:` line, exit code 2, nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers.cli import error_lines, primus_reporting_torch, run_dirs

LLAMA_3_2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "vocab_size": 256, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
             "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 512}}


def hf_folder(tmp_path: Path, name: str = "tiny-llama", config: dict | None = None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_3_2 if config is None else config))
    return folder


def test_cfg_job_prints_the_folders_architecture_without_torch(tmp_path):
    folder = hf_folder(tmp_path)
    result, torch_imported = primus_reporting_torch(f"model.from_hf={folder}", "--cfg", "job", "-p", "model",
                                                    cwd=tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    model = yaml.safe_load(result.stdout)
    assert (model["name"], model["from_hf"], model["hidden_size"], model["head_dim"], model["tie_embeddings"]) == \
        ("tiny-llama", str(folder), 64, 16, True)
    assert (model["rope_theta"], model["rope_scaling"]["type"], model["rope_scaling"]["factor"]) == (500000.0, "llama3", 32.0)
    assert not torch_imported


def test_a_dry_run_translates_the_folders_model(tmp_path):
    folder = hf_folder(tmp_path)
    result, torch_imported = primus_reporting_torch(f"model.from_hf={folder}", "model.hidden_size=64",
                                                    "task.dry_run=true", cwd=tmp_path,
                                                    env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})

    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path / "out")
    backend_args = yaml.safe_load((run_dir / "backend_args.yaml").read_text())
    assert (backend_args["model"]["name"], backend_args["model"]["num_kv_heads"]) == ("tiny-llama", 2)
    assert not torch_imported


# every line is read_hf_config's / model_fields_from_hf's / compose's (tests/unit/test_hf_config.py); from the
# command line a folder the schema refuses and a key that disagrees with it show exit 2 before torch, nothing written
@pytest.mark.parametrize("args, expected", [
    (["model.from_hf={tmp}/gpt2"], "model.from_hf: {tmp}/gpt2/config.json: model_type 'gpt2' is not supported; "
                                   "supported: llama, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2, deepseek_v3"),
    (["model.from_hf={tmp}/tiny-llama", "model.num_layers=4"],
     "model.num_layers=4 (command line) disagrees with {tmp}/tiny-llama/config.json, which gives 2"),
])
def test_a_bad_from_hf_is_one_line_exit_2_no_torch_nothing_written(tmp_path, args, expected):
    hf_folder(tmp_path)
    hf_folder(tmp_path, "gpt2", {"model_type": "gpt2", "n_embd": 64})
    result, torch_imported = primus_reporting_torch(*[arg.format(tmp=tmp_path) for arg in args], cwd=tmp_path,
                                                    env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})

    assert result.returncode == 2, result.stderr[-3000:]
    assert len(error_lines(result.stderr)) == 1, result.stderr[-3000:]
    assert error_lines(result.stderr)[0].startswith(f"error: {expected.format(tmp=tmp_path)}"), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and not torch_imported
    assert not (tmp_path / "out").exists()


def test_a_sweep_over_folders_gives_each_point_its_folders_model(tmp_path):
    small = hf_folder(tmp_path, "small")
    wide = hf_folder(tmp_path, "wide", {**LLAMA_3_2, "hidden_size": 128, "head_dim": 32})
    result, _ = primus_reporting_torch("-m", f"model.from_hf={small},{wide}", "task.dry_run=true", cwd=tmp_path,
                                       env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})

    assert result.returncode == 0, result.stderr[-3000:]
    models = [yaml.safe_load((run_dir / "backend_args.yaml").read_text())["model"] for run_dir in run_dirs(tmp_path / "out")]
    assert sorted((model["name"], model["hidden_size"]) for model in models) == [("small", 64), ("wide", 128)]
