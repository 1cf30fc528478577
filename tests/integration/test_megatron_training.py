"""backend=megatron trains on megatron-core's own classes through the project's launcher, and means the same model as
backend=torch: from the same seed and the same batches (backend.dataset=native) both start from the same weights and
follow the same loss curve (fp32, 5 steps, 1e-4 relative); every megatron layout follows the one-process megatron
curve on megatron.core.datasets' batches (the default text source built into an indexed dataset); checkpoints
reshard across layouts and cross between the backends."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import primus
from helpers.curves import assert_same_curve, eval_losses, losses
from helpers.libraries import needs_megatron_core
from helpers.overrides import LLAMA4_TINY, SHORT_RUN, saving_every
from helpers.shared_runs import shared_run

pytestmark = [pytest.mark.slow, needs_megatron_core]

QUICK = [*SHORT_RUN, "module.eval_interval=5", "module.eval_iters=2"]
# GQA (8 heads, 4 groups), RoPE, SwiGLU, untied embeddings; the third also ties them and changes the norm eps; the
# last reads mock batches instead of the default text. Cross-backend runs read backend=torch's own batches.
SAME_BATCHES = "backend.dataset=native"
MODELS = {
    "llama_tiny": ["model=llama_tiny"],
    "moe_tiny": ["model=moe_tiny"],
    "llama_tiny_tied": ["model=llama_tiny", "model.tie_embeddings=true", "model.norm_eps=1e-6"],
    "llama_tiny_mock_data": ["model=llama_tiny", "module.data.source=mock"],
}
LAYOUTS = {
    "dp2": ("llama_tiny", ["launch.nproc_per_node=2"]),
    "dp2_plain_optimizer": ("llama_tiny", ["launch.nproc_per_node=2", "backend.use_distributed_optimizer=false"]),
    "tp2": ("llama_tiny", ["launch.nproc_per_node=2", "module.parallel.tp=2"]),
    "tp2_sequence_parallel": ("llama_tiny", ["launch.nproc_per_node=2", "module.parallel.tp=2",
                                             "module.parallel.sequence_parallel=true"]),
    "pp2_interleaved": ("llama_tiny", ["launch.nproc_per_node=2", "module.parallel.pp=2",
                                       "backend.virtual_stages_per_pipeline_rank=2"]),
    # 1F1B over uneven stages (1 layer + 3); the interleaved case above splits evenly
    "pp2_1f1b_uneven": ("llama_tiny", ["launch.nproc_per_node=2", "module.parallel.pp=2",
                                       "backend.decoder_first_pipeline_num_layers=1"]),
    "ep2": ("moe_tiny", ["launch.nproc_per_node=2", "module.parallel.ep=2", SAME_BATCHES]),
}


def train(run_dir: Path, *args: str) -> dict[int, float]:
    result = primus(f"hydra.run.dir={run_dir}", *QUICK, *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return losses(run_dir)


@pytest.fixture(scope="module")
def megatron_curve(tmp_path_factory):
    """The one-process backend=megatron curve of each model (with the given extra arguments), trained once."""
    cache: dict[tuple, Path] = {}

    def run_dir(model: str, *extra: str) -> Path:
        if (model, extra) not in cache:
            cache[model, extra] = tmp_path_factory.mktemp(model) / "run"
            train(cache[model, extra], "backend=megatron", *MODELS[model], *extra)
        return cache[model, extra]

    def curve(model: str, *extra: str) -> dict[int, float]:
        return losses(run_dir(model, *extra))

    curve.evals = lambda model, *extra: eval_losses(run_dir(model, *extra))  # step -> held-out loss
    return curve


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    """The one-process backend=torch run of each model (its final step saved, for the cross-backend checkpoints),
    trained once."""
    cache: dict[str, Path] = {}

    def run_dir(model: str) -> Path:
        if model not in cache:
            cache[model] = tmp_path_factory.mktemp(f"native_{model}") / "run"
            train(cache[model], "backend=torch", *MODELS[model], "module.checkpoint.save_final=true")
        return cache[model]

    return run_dir


@pytest.mark.parametrize("model", list(MODELS))
def test_megatron_follows_the_native_curve_from_the_same_seed(native_run, megatron_curve, model):
    native = losses(native_run(model))
    assert_same_curve(megatron_curve(model, SAME_BATCHES), native)
    # the held-out loss after step 5, through megatron-core's forward-only schedule, from the same batches
    assert_same_curve(megatron_curve.evals(model, SAME_BATCHES), eval_losses(native_run(model)))
    if "mock" not in model:  # uniform random tokens teach nothing: their loss stays near ln(vocab)
        assert native[5] < native[1]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_megatron_layout_follows_the_one_process_curve(tmp_path, megatron_curve, layout):
    model, args = LAYOUTS[layout]
    run_dir = tmp_path / "run"
    same_batches = [arg for arg in args if arg == SAME_BATCHES]  # the curve the parity test trained already
    assert_same_curve(train(run_dir, "backend=megatron", *MODELS[model], *args), megatron_curve(model, *same_batches))
    assert_same_curve(eval_losses(run_dir), megatron_curve.evals(model, *same_batches))
    assert sorted(p.name for p in (run_dir / "logs").glob("rank_*.log")) == ["rank_0.log", "rank_1.log"]
    if layout == "pp2_1f1b_uneven":  # stage 0: the embedding and 1 layer; stage 1: 3 layers, the final norm and output
        layer = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256
        for rank, held in ((0, 256 * 256 + layer), (1, 3 * layer + 256 + 256 * 256)):
            assert f"this rank holds {held:,}" in (run_dir / "logs" / f"rank_{rank}.log").read_text()


def test_a_dp2_checkpoint_resumes_on_tp2_on_the_uninterrupted_curve(tmp_path, megatron_curve):
    """In the same run dir: the resumed run also reuses the text's indexed dataset the first one built."""
    saving = saving_every(3, QUICK)
    run_dir = tmp_path / "run"
    first = primus(f"hydra.run.dir={run_dir}", *saving, "backend=megatron", "model=llama_tiny",
                   "launch.nproc_per_node=2", "module.exit_interval=3", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    meta = json.loads((run_dir / "checkpoints" / "step_0000003" / "meta.json").read_text())
    assert (meta["backend"], meta["world_size"], meta["layout"]["dp"]) == ("megatron", 2, 2)
    resumed = primus(f"hydra.run.dir={run_dir}", *saving, "backend=megatron", "model=llama_tiny",
                     "launch.nproc_per_node=2", "module.parallel.tp=2", "module.checkpoint.resume=auto", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = (run_dir / "logs" / "rank_0.log").read_text()
    assert "resumed from" in log and "text as an indexed dataset: reusing" in log
    assert_same_curve(losses(run_dir), megatron_curve("llama_tiny"))


def test_checkpoints_cross_between_the_backends(tmp_path, native_run):
    """A native step loads into megatron (tp=2), and that megatron run's step loads into native: each pair of runs
    started from the same weights follows the same curve."""
    saving = ["module.checkpoint.save_final=true"]
    from_native = {backend: train(tmp_path / f"{backend}_from_native", f"backend={backend}", "model=llama_tiny", *extra,
                                  f"module.checkpoint.load={native_run('llama_tiny') / 'checkpoints'}", *saving)
                   for backend, extra in (("megatron", ["launch.nproc_per_node=2", "module.parallel.tp=2", SAME_BATCHES]),
                                          ("torch", []))}
    assert_same_curve(from_native["megatron"], from_native["torch"])
    megatron_step = tmp_path / "megatron_from_native" / "checkpoints"
    from_megatron = {backend: train(tmp_path / f"{backend}_from_megatron", f"backend={backend}", "model=llama_tiny",
                                    f"module.checkpoint.load={megatron_step}", *extra)
                     for backend, extra in (("torch", []), ("megatron", [SAME_BATCHES]))}
    assert_same_curve(from_megatron["torch"], from_megatron["megatron"])
    assert not (tmp_path / "torch_from_megatron" / ".primus" / "converted").exists()


def test_a_default_megatron_run_leaves_the_native_run_files(tmp_path):
    run_dir = tmp_path / "run"
    result = primus(f"hydra.run.dir={run_dir}", "backend=megatron", "module.train_iters=3", "module.seq_length=64",
                    "module.checkpoint.interval=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warning: module.warmup_iters=15 exceeds module.train_iters=3" in result.stderr
    assert sorted(losses(run_dir)) == [1, 2, 3]
    assert (run_dir / "loss_curve.png").stat().st_size > 0 and list((run_dir / "tensorboard").iterdir())
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_0000003"
    assert json.loads((run_dir / "checkpoints" / "step_0000002" / "meta.json").read_text())["format"] == (
        "megatron.core.dist_checkpointing")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, expected", [
    (["+backend.extra_args.bogus_knob=1"], "error: backend.extra_args.bogus_knob: backend.trainer=core reads no argument"),
    (["+backend.extra_args.recompute_granularity=full"],
     "error: backend=megatron: megatron-core refuses these arguments: Using recompute_granularity: full so "
     "recompute_method must be"),
    (["launch.nproc_per_node=2", "module.parallel.cp=2"],
     "error: module.parallel.cp=2: megatron-core's context parallelism runs in Transformer Engine's attention only"),
    (["model=deepseek_v2_lite", "module.data.source=mock", "launch.allow_oversubscribe=true"],
     "error: model=deepseek_v2_lite: multi-latent attention in megatron-core 0.16 needs Transformer Engine"),
    (["backend.trainer=bogus"], "error: backend.trainer=bogus: expected one of auto, core, megatron_lm or a trainer "
                                "class path"),
    (["backend.virtual_stages_per_pipeline_rank=2"],
     "error: backend.virtual_stages_per_pipeline_rank=2: needs module.parallel.pp >= 2 and model.num_layers=4 "
     "divisible by pp x stages = 2"),
], ids=["unread_extra_arg", "megatron_core_check", "cp_without_te", "mla_without_te", "unknown_trainer",
        "virtual_stages_without_pp"])
def test_what_megatron_core_cannot_run_is_one_line_before_any_worker(tmp_path, args, expected):
    result = primus("backend=megatron", "module.train_iters=2", *args, cwd=tmp_path,
                    env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[0].startswith(expected), result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_megatron_core_missing_names_the_extra(tmp_path):
    """A `megatron` package without `core` first on the path (what an unrelated package of that name looks like)."""
    shadow = tmp_path / "shadow" / "megatron"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    result = primus("backend=megatron", "module.train_iters=2", cwd=tmp_path,
                    env={"PYTHONPATH": str(shadow.parent), "PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[0].startswith("error: backend=megatron needs megatron.core, which cannot be found")
    assert "pip install 'primus-hydra[megatron]'" in result.stderr.splitlines()[0]


def test_llama4s_interleaved_moe_with_scores_on_the_inputs_follows_the_native_curve(tmp_path, tmp_path_factory):
    """moe_layer_freq as the layer pattern [0,1] and moe_apply_probs_on_input: megatron-core's model of the same
    weights and batches as backend=torch's (one micro-batch per step: the expert bias moves once per step in both;
    backend=torch's run is the one test_torchtitan_training.py's Llama 4 test reads, trained once)."""
    one_batch = ["module.micro_batch_size=8", "module.weight_decay=0"]
    native = losses(shared_run("llama4_native", tmp_path_factory))
    assert_same_curve(train(tmp_path / "megatron", "backend=megatron", *LLAMA4_TINY, *one_batch, SAME_BATCHES), native)
    assert native[5] < native[1]
