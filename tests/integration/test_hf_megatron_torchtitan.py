"""module.checkpoint.load=<Hugging Face folder> with backend=megatron (its core trainer) and backend=torchtitan: a run
starts from the folder's weights. Its first-step loss is backend=torch's from the same folder and transformers' own on
the same batch (1e-5), and the steps after follow backend=torch's curve (1e-4) on a sharded layout of each (megatron
tp=2, torchtitan fsdp=2); every family each backend trains starts at transformers' first loss (on one process)
and task=export of that step gives the folder's tensors back;
torchtitan gets the very tensors its own converter (StateDictAdapter.from_hf) makes of the folder; a folder the run
cannot start from is one line, exit 2, before any worker starts."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import hf_models
from helpers.cli import error_lines, primus
from helpers.compose import REPO, compose_primus
from helpers.curves import assert_same_curve, losses
from helpers.hf_models import assert_exports_the_tensors_of, needs_transformers
from helpers.libraries import needs_megatron_core, needs_torchtitan
from helpers.overrides import NO_CHECKPOINTS, QUIET_LOGS, SMALL_BATCHES

pytestmark = [pytest.mark.slow, needs_transformers]

STEPS = 5  # 30 follow as closely (measured: 2e-7 megatron, 1e-7 torchtitan); 5 already pass warmup and the peak lr
# torchtitan's AdamW decays every weight, backend=torch's not its norms: without weight decay the two are one optimizer
RUN = [f"module.train_iters={STEPS}", "module.warmup_iters=2", *SMALL_BATCHES, "module.log.interval=1", *QUIET_LOGS,
       *NO_CHECKPOINTS, "module.weight_decay=0"]
SAME_BATCHES = "backend.dataset=native"  # megatron reads backend=torch's batches
# the sharded layouts only: each backend's one-process load is FAMILIES' (llama_tied, mixtral; qwen3_moe,
# deepseek_v3), and a curve that follows on two ranks follows on one
LAYOUTS = {
    "megatron_tp2": pytest.param(["backend=megatron", SAME_BATCHES, "launch.nproc_per_node=2", "module.parallel.tp=2"],
                                 marks=needs_megatron_core),
    "torchtitan_fsdp2": pytest.param(["backend=torchtitan", "launch.nproc_per_node=2", "module.parallel.fsdp=true"],
                                     marks=needs_torchtitan),
}
# (backend, HF model, the backend's arguments, arguments of the run and the reference batch): every family each
# backend trains from a folder (each case a name table of its own)
DEEPSEEK_ON_TORCHTITAN = ["model.moe.router_bias_update_rate=0.001",  # torchtitan keeps the expert bias only so
                          "module.micro_batch_size=8"]  # one micro-batch: backend=torch updates the bias after each
FAMILIES = {
    "megatron_llama_tied": pytest.param("megatron", "llama_tied", [SAME_BATCHES], [], marks=needs_megatron_core),
    "megatron_qwen3_moe_ep2": pytest.param("megatron", "qwen3_moe", [SAME_BATCHES, "launch.nproc_per_node=2",
                                                                     "module.parallel.ep=2"], [],
                                           marks=needs_megatron_core),
    "megatron_mixtral": pytest.param("megatron", "mixtral", [SAME_BATCHES], [], marks=needs_megatron_core),
    "torchtitan_qwen3_moe": pytest.param("torchtitan", "qwen3_moe", [], [], marks=needs_torchtitan),
    "torchtitan_deepseek_v3": pytest.param("torchtitan", "deepseek_v3", [], DEEPSEEK_ON_TORCHTITAN,
                                           marks=needs_torchtitan),
}


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """The tiny HF model of that name (tests/helpers/hf_models.py), saved once for the module."""
    root, made = tmp_path_factory.mktemp("hf"), {}

    def folder(name: str) -> Path:
        if name not in made:
            made[name] = hf_models.BUILDERS[name](root / name)
        return made[name]

    return folder


def train(run_dir: Path, folder: Path, *args: str) -> dict[int, float]:
    result = primus(f"hydra.run.dir={run_dir}", *RUN, f"model.from_hf={folder}", f"module.checkpoint.load={folder}",
                    *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "initial weights loaded from" in (run_dir / "logs" / "rank_0.log").read_text()
    return losses(run_dir)


@pytest.fixture(scope="module")
def native_curve(tmp_path_factory, hf_folder) -> dict[int, float]:
    return train(tmp_path_factory.mktemp("native") / "run", hf_folder("llama"), "backend=torch")


def transformers_first_loss(folder: Path, *args: str) -> float:
    """transformers' own loss of the folder's model on the batch of step 1 (the native sampler's step 0)."""
    import torch
    import transformers

    from primus_hydra.backends.common.data import TokenBatches

    module = compose_primus(*RUN, *args).module
    inputs, targets = TokenBatches.for_module(module, hf_models.VOCAB).batch(0, 0, module.global_batch_size)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


def test_the_native_first_step_is_transformers_own_loss(hf_folder, native_curve):
    assert native_curve[1] == pytest.approx(transformers_first_loss(hf_folder("llama")), rel=1e-5)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_run_starts_from_the_hf_weights_on_the_native_curve(tmp_path, hf_folder, native_curve, layout):
    curve = train(tmp_path / "run", hf_folder("llama"), *LAYOUTS[layout].values[0])
    assert curve[1] == pytest.approx(native_curve[1], rel=1e-5)
    assert_same_curve(curve, native_curve)


# one still step (a learning rate too small to move a weight by 1e-6) whose last step is saved
STILL_STEP = ["module.train_iters=1", "module.lr=1e-12", "module.min_lr=0", "module.checkpoint.save_final=true"]


@pytest.mark.parametrize("case", list(FAMILIES))
def test_each_family_starts_at_transformers_first_loss_and_exports_the_same_tensors(tmp_path, hf_folder, case):
    """transformers' loss on the same batch, in this process (backend=torch's own is the test above's); task=export of
    the backend's checkpoint (its weight converter out) gives the folder's tensors back."""
    backend, model, backend_args, shared = FAMILIES[case].values
    run_dir = tmp_path / backend
    first = train(run_dir, hf_folder(model), f"backend={backend}", *STILL_STEP, *shared, *backend_args)[1]
    assert first == pytest.approx(transformers_first_loss(hf_folder(model), *shared), rel=1e-5)
    # the expert bias moves by its own rate, whatever the learning rate
    moved = ("e_score_correction_bias",) if "model.moe.router_bias_update_rate=0.001" in shared else ()
    assert_exports_the_tensors_of(hf_folder(model), run_dir, tmp_path / "exported", moved)

FROM_HF_REFERENCE = """
import json, sys
sys.path.insert(0, "tests")
import torch
from safetensors.torch import load_file
from helpers.compose import compose_primus
from primus_hydra.backends.torchtitan.args import build_torchtitan_job_config
from primus_hydra.backends.torchtitan.convert import load_hf_weights
from primus_hydra.backends.torchtitan.trainer import _with_overrides, base_flavor
from primus_hydra.config.hf_config import apply_model_from_hf
from primus_hydra.config.layout import parallel_layout
from torchtitan.config import JobConfig
from torchtitan.protocols.train_spec import get_train_spec

def compare(folder, *overrides):
    overrides = ["backend=torchtitan", f"model.from_hf={folder}", "module.data.source=mock", *overrides]
    cfg = compose_primus(*overrides)
    apply_model_from_hf(cfg, overrides)
    job = build_torchtitan_job_config(cfg, None, parallel_layout(cfg, 1))
    spec = get_train_spec(job["model"]["name"])
    args = _with_overrides(spec.model_args[base_flavor(spec, job["model"]["flavor"], None)], job["model_args"])
    args.update_from_config(JobConfig())
    model = spec.model_cls(args)
    load_hf_weights([model], folder, cfg.model)
    ours = model.state_dict()
    reference = spec.state_dict_adapter(args, None).from_hf(load_file(f"{folder}/model.safetensors"))
    return {"torchtitan_model": job["model"]["name"], "only_ours": sorted(set(ours) - set(reference)),
            "only_reference": sorted(set(reference) - set(ours)),
            "different": sorted(name for name in set(ours) & set(reference)
                                if not torch.equal(ours[name], reference[name]))}

print(json.dumps([compare(folder, *overrides) for folder, *overrides in json.loads(sys.argv[1])]))
"""


@needs_torchtitan
def test_torchtitan_gets_the_tensors_its_own_hf_converter_makes(hf_folder):
    """torchtitan's StateDictAdapter.from_hf of the folder's tensors: the same names and values, bit for bit (one
    process for the three families: torchtitan's import is most of its time)."""
    models = {"llama": "llama3", "qwen3_moe": "qwen3", "deepseek_v3": "deepseek_v3"}
    cases = [[str(hf_folder(model)), *(DEEPSEEK_ON_TORCHTITAN[:1] if model == "deepseek_v3" else [])] for model in models]
    result = subprocess.run([sys.executable, "-c", FROM_HF_REFERENCE, json.dumps(cases)],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == [
        {"torchtitan_model": name, "only_ours": [], "only_reference": [], "different": []} for name in models.values()]


# what each backend's adapter refuses of a folder; the folder's own checks (another architecture, a damaged shard) are
# check_hf_folder's, the same for every backend (tests/unit/test_hf_checkpoint.py, test_hf_torch.py)
REFUSED = {  # (backend, the job's model, the folder to load, the line)
    "megatron_latent_attention": pytest.param(
        "megatron", "deepseek_v3", "deepseek_v3", "backend=megatron converts no multi-latent attention weights",
        marks=needs_megatron_core),
    "torchtitan_frozen_expert_bias": pytest.param(
        "torchtitan", "deepseek_v3", "deepseek_v3", "model.moe.router_bias_update_rate=0.0: torchtitan's MoE keeps "
        "its expert bias only while it updates it", marks=needs_torchtitan),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_folder_the_run_cannot_start_from_is_one_line_before_any_worker(tmp_path, hf_folder, case):
    backend, model, loaded, expected = REFUSED[case].values
    run_dir = tmp_path / "run"
    result = primus(f"hydra.run.dir={run_dir}", *RUN, f"backend={backend}", f"model.from_hf={hf_folder(model)}",
                    f"module.checkpoint.load={hf_folder(loaded)}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in error_lines(result.stderr) if expected in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert not run_dir.exists()
