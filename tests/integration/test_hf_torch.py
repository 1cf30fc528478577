"""Hugging Face in and out through the CLI with backend=torch: a run starts from an HF folder
(module.checkpoint.load=<HF dir>, in one process and in sharded layouts), its first loss is transformers' loss on
the same batch, and task=export writes the same tensors back; a damaged folder or a bad export is one line, exit 2,
nothing written."""
from __future__ import annotations

import json
import shutil

import pytest

from helpers.cli import error_lines, primus
from helpers.hf_models import (
    BuiltOnDemand,
    assert_exports_the_tensors_of,
    damage,
    generate_prepared,
    needs_transformers,
    transformers_greedy,
)
from helpers.overrides import QUIET_LOGS

pytestmark = needs_transformers

# one step at a learning rate too small to move a weight by 1e-6: the run saves the weights it started from
ONE_STILL_STEP = ["module.train_iters=1", "module.warmup_iters=0", "module.lr=1e-12", "module.min_lr=0",
                  "module.seq_length=32", "module.micro_batch_size=2", "module.global_batch_size=4",
                  "module.log.interval=1", *QUIET_LOGS]
# what each layout proves that the others do not: llama-1proc the plain load; llama-fsdp2 a multi-file folder read into DTensor shards; llama-tp2 column/row splits; llama-pp2 a
# pipeline stage reading only its layers; qwen3_moe the MoE and q/k-norm name table; deepseek_v3 MLA with the rope
# row permutation and sigmoid routing, sharded
LAYOUTS = {
    "llama-1proc": ("llama", ()),
    "llama-fsdp2": ("llama_sharded", ("launch.nproc_per_node=2", "module.parallel.fsdp=true")),
    "llama-tp2": ("llama", ("launch.nproc_per_node=2", "module.parallel.tp=2")),
    "llama-pp2": ("llama", ("launch.nproc_per_node=2", "module.parallel.pp=2", "module.parallel.pp_schedule=gpipe")),
    "qwen3_moe-1proc": ("qwen3_moe", ()),
    "deepseek_v3-fsdp2": ("deepseek_v3", ("launch.nproc_per_node=2", "module.parallel.fsdp=true")),
}


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return BuiltOnDemand(root)


@pytest.fixture(scope="module")
def still_runs(tmp_path_factory, hf_folders):
    """{(family, layout): run dir} of one still step from the HF folder, each run once for the module."""
    root, made = tmp_path_factory.mktemp("runs"), {}

    def run(family: str, layout: tuple[str, ...] = ()):
        if (family, layout) not in made:
            made[family, layout] = _train_from(hf_folders[family], root, list(layout), name=f"run{len(made)}")
        return made[family, layout]

    return run


def _train_from(folder, tmp_path, layout: list[str], load=None, name: str = "run"):
    """One still step of model.from_hf=folder, starting from `load` (default: the folder's weights)."""
    run_dir = tmp_path / name
    result = primus(f"model.from_hf={folder}", f"module.checkpoint.load={load or folder}", *ONE_STILL_STEP, *layout,
                    f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def _transformers_first_loss(folder, run_dir) -> float:
    """transformers' loss on the batch of the run's first step (every data-parallel rank's sequences)."""
    import torch
    import torch.nn.functional as F
    import transformers
    from omegaconf import OmegaConf

    from primus_hydra.backends.common.data import TokenBatches

    module = OmegaConf.load(run_dir / "config_resolved.yaml").module
    inputs, targets = TokenBatches.for_module(module, 256).batch(0, 0, int(module.global_batch_size))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(inputs).logits
    # the run averages the loss of each micro-batch: the same mean, as every micro-batch has as many tokens
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_run_from_hf_weights_starts_at_transformers_loss_and_exports_the_same_tensors(hf_folders, still_runs,
                                                                                        tmp_path, layout):
    family, overrides = LAYOUTS[layout]
    folder = hf_folders[family]
    run_dir = still_runs(family, overrides)
    first = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 1 and abs(first["loss"] - _transformers_first_loss(folder, run_dir)) < 1e-5

    assert_exports_the_tensors_of(folder, run_dir, tmp_path / "exported")
    if layout == "llama-1proc":  # the exported folder means what the original means: transformers' greedy tokens
        from primus_hydra.tasks.generate import generate_from_checkpoint

        prompt = [72, 101, 108, 108, 111]
        expected, _ = transformers_greedy(folder, prompt, 6)
        job = generate_prepared(f"task.checkpoint={tmp_path / 'exported'}", f"task.prompt_tokens={prompt}",
                                "task.max_new_tokens=6")
        assert generate_from_checkpoint(job).tokens == expected


def test_export_writes_bf16_shards_of_the_size_asked_that_transformers_loads(still_runs, tmp_path):
    """The export command itself, on the qwen3_moe run above (every family's tensors: tests/unit/test_hf_checkpoint.py)."""
    import torch
    import transformers

    run_dir = still_runs("qwen3_moe")
    out = tmp_path / "exported"
    result = primus("task=export", f"task.checkpoint={run_dir / 'checkpoints' / 'step_0000001'}", f"task.out={out}",
                    "task.max_shard_size=100KB", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list(out.glob("*.safetensors"))) > 1 and not list(tmp_path.glob(".exported*"))
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert type(loaded).__name__ == "Qwen3MoeForCausalLM" and loaded.dtype == torch.bfloat16
    assert not (tmp_path / "outputs").exists()  # no run dir for an export


# every defect's line is check_hf_folder's (tests/unit/test_hf_checkpoint.py); from the command line, one defect of
# the index and one of a shard's bytes show the check runs before any worker and writes nothing
@pytest.mark.parametrize("defect", ["index names another file", "truncated shard"])
def test_a_damaged_hf_folder_to_start_from_is_one_line_before_any_worker(hf_folders, tmp_path, defect):
    folder = shutil.copytree(hf_folders["llama_sharded"], tmp_path / "damaged")
    expected = damage(folder, defect)
    run_dir = tmp_path / "run"
    result = primus(f"model.from_hf={hf_folders['llama_sharded']}", f"module.checkpoint.load={folder}",
                    *ONE_STILL_STEP, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    lines = error_lines(result.stderr)
    assert result.returncode == 2 and len(lines) == 1 and expected in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not run_dir.exists()


# each bad export's line is ExportTask.prepare_job's (tests/unit/test_hf_checkpoint.py); one from the command line
def test_a_bad_export_is_one_line_and_writes_nothing(hf_folders, tmp_path):
    before, expected = sorted(tmp_path.iterdir()), "already a Hugging Face folder"
    result = primus("task=export", f"task.checkpoint={hf_folders['llama']}", f"task.out={tmp_path}/x", cwd=tmp_path)
    lines = error_lines(result.stderr)
    assert result.returncode == 2 and len(lines) == 1 and expected in lines[0], result.stderr[-2000:]
    assert sorted(tmp_path.iterdir()) == before
